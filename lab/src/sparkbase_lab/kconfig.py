"""`/boot/config-<release>`: the kernel configuration a kernel image package installs.

Shaped as Kconfig writes a `.config` (real sample: an arm64 6.10 configuration posted to
linux-mm by an NVIDIA engineer, 2024: the `# Automatically generated file; DO NOT EDIT.`
banner, `CONFIG_CC_VERSION_TEXT`, menu comments `#\\n# Kernel Features\\n#` closed by
`# end of …`, `# CONFIG_X is not set`), and holding the options a tool written for real
Sparks reads: the page-size choice of arch/arm64/Kconfig (`CONFIG_ARM64_64K_PAGES=y` on the
`-64k` flavour, `CONFIG_ARM64_4K_PAGES=y` on the others: Ubuntu builds `arm64-generic` and
`arm64-generic-64k` from one annotations file, Canonical kernel-team docs "Working with the
Ubuntu kernel config"), the `PAGE_SIZE_*`/`PAGE_SHIFT` options 6.9+ derive from it, and
module signing as Ubuntu's kernels sign (SHA-512, as the lab's `modinfo` prints). The
recipe's doctor requires `CONFIG_ARM64_64K_PAGES=y` in `/boot/config-<64k release>`
(spark-ds41f scripts/kernel_readiness.py 0ad64e14). Everything else a real configuration
holds (thousands of options) is not emulated; the compiler string is the lab's.
"""

from __future__ import annotations

#: the compiler line (a lab value: Ubuntu 24.04's cross compiler as its kernels name it)
CC_VERSION_TEXT = "aarch64-linux-gnu-gcc-13 (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0"


def _choice(options: list[tuple[str, bool]]) -> list[str]:
    return [f"CONFIG_{name}=y" if chosen else f"# CONFIG_{name} is not set" for name, chosen in options]


def kernel_config(release: str) -> str:
    """The configuration of kernel `release` (64 KiB pages for the `-64k` flavour)."""
    big = release.endswith("-64k")
    upstream = release.split("-", 1)[0]
    page_shift = 16 if big else 12
    lines = [
        "#",
        "# Automatically generated file; DO NOT EDIT.",
        f"# Linux/arm64 {upstream} Kernel Configuration",
        "#",
        f'CONFIG_CC_VERSION_TEXT="{CC_VERSION_TEXT}"',
        "CONFIG_CC_IS_GCC=y",
        "CONFIG_GCC_VERSION=130300",
        "CONFIG_IRQ_WORK=y",
        "CONFIG_BUILDTIME_TABLE_SORT=y",
        "CONFIG_THREAD_INFO_IN_TASK=y",
        "",
        "#",
        "# General setup",
        "#",
        "CONFIG_INIT_ENV_ARG_LIMIT=32",
        "# CONFIG_COMPILE_TEST is not set",
        'CONFIG_LOCALVERSION=""',
        "# CONFIG_LOCALVERSION_AUTO is not set",
        "CONFIG_SYSVIPC=y",
        "CONFIG_POSIX_MQUEUE=y",
        "# end of General setup",
        "",
        "CONFIG_ARM64=y",
        "CONFIG_64BIT=y",
        f"CONFIG_ARM64_PAGE_SHIFT={page_shift}",
        f"CONFIG_ARM64_CONT_PTE_SHIFT={5 if big else 4}",
        f"CONFIG_ARM64_CONT_PMD_SHIFT={5 if big else 4}",
        "CONFIG_MMU=y",
        "CONFIG_SMP=y",
        f"CONFIG_PGTABLE_LEVELS={3 if big else 4}",
        "",
        "#",
        "# Kernel Features",
        "#",
        *_choice([("ARM64_4K_PAGES", not big), ("ARM64_16K_PAGES", False), ("ARM64_64K_PAGES", big)]),
        *_choice([("ARM64_VA_BITS_48", True), ("ARM64_VA_BITS_52", False)]),
        "CONFIG_ARM64_VA_BITS=48",
        "CONFIG_ARM64_PA_BITS_48=y",
        "CONFIG_ARM64_PA_BITS=48",
        "CONFIG_CPU_LITTLE_ENDIAN=y",
        "CONFIG_SCHED_MC=y",
        "CONFIG_NR_CPUS=512",
        "CONFIG_NUMA=y",
        "# end of Kernel Features",
        "",
        "#",
        "# General architecture-dependent options",
        "#",
        f"CONFIG_HAVE_PAGE_SIZE_{'64KB' if big else '4KB'}=y",
        f"CONFIG_PAGE_SIZE_{'64KB' if big else '4KB'}=y",
        *([] if big else ["CONFIG_PAGE_SIZE_LESS_THAN_64KB=y"]),
        "CONFIG_PAGE_SIZE_LESS_THAN_256KB=y",
        f"CONFIG_PAGE_SHIFT={page_shift}",
        "# end of General architecture-dependent options",
        "",
        "CONFIG_MODULE_SIG_FORMAT=y",
        "CONFIG_MODULES=y",
        "CONFIG_MODULE_UNLOAD=y",
        "CONFIG_MODVERSIONS=y",
        "CONFIG_MODULE_SIG=y",
        "# CONFIG_MODULE_SIG_FORCE is not set",
        "CONFIG_MODULE_SIG_ALL=y",
        *_choice([("MODULE_SIG_SHA256", False), ("MODULE_SIG_SHA384", False), ("MODULE_SIG_SHA512", True)]),
        'CONFIG_MODULE_SIG_HASH="sha512"',
        "CONFIG_TRANSPARENT_HUGEPAGE=y",
        "# CONFIG_TRANSPARENT_HUGEPAGE_ALWAYS is not set",
        "CONFIG_TRANSPARENT_HUGEPAGE_MADVISE=y",
        "CONFIG_DRM=m",
        "CONFIG_THERMAL=y",
        "CONFIG_ACPI_THERMAL=y",
        "CONFIG_VT=y",
        "CONFIG_VT_CONSOLE=y",
    ]
    return "\n".join(lines) + "\n"
