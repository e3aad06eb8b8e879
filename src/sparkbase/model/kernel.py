"""The kernel section: the release a node runs, its packages and how it boots."""

from __future__ import annotations

from pydantic import Field

from sparkbase.model.types import KernelArg, KernelRelease, PackagePin, PackageVersion, PageSize, StrictModel

#: the package stem of the per-kernel cpupower binary (`linux-tools-<release>`), which DGX OS's
#: governor unit runs (`host.cpu_governor`)
TOOLS_PACKAGE_STEM = "linux-tools"
#: the packages of one kernel release (image, headers, modules), all at its package version
KERNEL_PACKAGE_STEMS: tuple[str, ...] = ("linux-image", "linux-headers", "linux-modules")


class FallbackKernelSpec(StrictModel):
    """A second kernel kept installed (held, with its GRUB menu entry) so that the node can
    boot it when the baseline's kernel fails; GRUB's default stays the baseline's kernel.

    The variant's recipe keeps the 4 KiB `7.0.0-1019-nvidia` so (spark-ds41f
    config/kernel-trial.json `"fallback"`; docs/setup.md "Keep the 4 KiB kernel installed:
    it is the fallback.").
    """

    release: KernelRelease = Field(description="kernel release of the fallback, as `uname -r` prints it")
    package_version: PackageVersion = Field(
        description="Debian version of its linux-image/headers/modules packages"
    )

    def packages(self, driver_branch: str) -> list[PackagePin]:
        """Its kernel packages and the NVIDIA kernel-module package built for it (the kernel
        package version plus `+1`, as for the baseline's own kernel)."""
        pins = [PackagePin(name=f"{stem}-{self.release}", version=self.package_version)
                for stem in KERNEL_PACKAGE_STEMS]
        pins.append(PackagePin(name=f"linux-modules-nvidia-{driver_branch}-{self.release}",
                               version=f"{self.package_version}+1"))
        return pins


class KernelSpec(StrictModel):
    """The kernel the node must run and how it boots."""

    release: KernelRelease = Field(description="kernel release, as `uname -r` prints it")
    package_version: PackageVersion = Field(
        description="Debian version of the linux-image/headers/modules packages for the release"
    )
    page_size: PageSize = Field(description="base page size in bytes (`getconf PAGESIZE`)")
    cmdline_add: list[KernelArg] = Field(
        default_factory=list, description="arguments the kernel command line must carry"
    )
    cmdline_forbid: list[KernelArg] = Field(
        default_factory=list,
        description="arguments (by name, or name=value) the command line must not carry",
    )
    pin_grub_default: bool = Field(
        default=True, description="make this release GRUB's default entry (not just the newest)"
    )
    tools: bool = Field(
        default=False,
        description="also install linux-tools-<release>: the cpupower DGX OS's nv-cpu-governor.service "
        "runs (it fails on a kernel without it)",
    )
    fallback: FallbackKernelSpec | None = Field(
        default=None,
        description="a kernel kept installed beside this one, with its own GRUB entry (never the default)",
    )

    @property
    def grub_entry(self) -> str:
        """This release's entry as `GRUB_DEFAULT` names it: by menu-entry id, as the recipe
        pins it (spark-ds41f docs/setup.md 0925e797: `gnulinux-advanced-$uuid>gnulinux-
        <release>-advanced-$uuid`) and as Ubuntu writes `saved_entry`. The root file
        system's UUID differs per node, so the drop-in names it `${GRUB_DEVICE_UUID}`:
        grub-mkconfig sets that variable before it sources `/etc/default/grub.d/*.cfg`
        (jc-lab/ubuntu-grub2 util/grub-mkconfig.in 85c36775) and 10_linux builds the ids
        from the same UUID, so one file serves every node."""
        uuid = "${GRUB_DEVICE_UUID}"
        return f"gnulinux-advanced-{uuid}>gnulinux-{self.release}-advanced-{uuid}"

    def packages(self) -> list[PackagePin]:
        """The kernel packages this release needs, at the pinned version (with `tools`,
        also `linux-tools-<release>`, Ubuntu's per-kernel cpupower)."""
        stems = [*KERNEL_PACKAGE_STEMS, *([TOOLS_PACKAGE_STEM] if self.tools else [])]
        return [PackagePin(name=f"{stem}-{self.release}", version=self.package_version) for stem in stems]
