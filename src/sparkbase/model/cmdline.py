"""The kernel command line a baseline renders, and which typed field decides each argument.

Some kernel parameters are set by typed fields (THP, NVMe APST) or by settings sparkbase
writes elsewhere (nvidia-drm's modeset in modprobe.d, the boot target as systemd's
default). A free-form argument naming one of them would contradict the typed field, so
the rules refuse it; the renderer builds the command line from the same table, so what
the rules judge is what is rendered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkbase.model.baseline import Baseline
    from sparkbase.model.yamlio import PathKey

#: rendered on every node, whatever the baseline says
ALWAYS = ("quiet",)

#: huge page sizes arm64 offers per base page size (Documentation/arch/arm64/hugetlbpage.rst)
HUGE_PAGE_SIZES: dict[int, frozenset[str]] = {
    4096: frozenset({"64K", "2M", "32M", "1G"}),
    65536: frozenset({"2M", "512M", "16G"}),
}
#: parameters whose value is a huge page size
HUGE_PAGE_PARAMETERS = frozenset({"hugepagesz", "default_hugepagesz"})
#: the arm64 kernel keeps this many bytes of command line (COMMAND_LINE_SIZE,
#: arch/arm64/include/uapi/asm/setup.h); GRUB's own arguments need part of it
COMMAND_LINE_SIZE = 2048
#: what sparkbase leaves for GRUB's BOOT_IMAGE=…, root=UUID=… and ro
GRUB_RESERVE = 256


@dataclass(frozen=True)
class TypedParameter:
    """A kernel parameter a typed field decides."""

    name: str
    field: PathKey
    #: the argument sparkbase renders for it, or None when it renders none on the cmdline
    rendered: str | None


def parameter_name(arg: str) -> str:
    """`nvidia-drm.modeset=1` -> `nvidia_drm.modeset`: the kernel treats - and _ alike."""
    return arg.split("=", 1)[0].replace("-", "_")


def typed_parameters(baseline: Baseline) -> list[TypedParameter]:
    """Every kernel parameter a typed field of `baseline` decides, in render order."""
    memory, host = baseline.memory, baseline.host
    apst_off = host.nvme.apst == "disabled"
    parameters = [
        TypedParameter(
            "transparent_hugepage",
            ("memory", "transparent_hugepages"),
            f"transparent_hugepage={memory.transparent_hugepages}",
        ),
        TypedParameter(
            "nvme_core.default_ps_max_latency_us",
            ("host", "nvme", "apst"),
            "nvme_core.default_ps_max_latency_us=0" if apst_off else None,
        ),
        TypedParameter("nvidia_drm.modeset", ("host", "nvidia_drm", "modeset"), None),
        TypedParameter("nvidia_drm.fbdev", ("host", "nvidia_drm", "fbdev"), None),
        TypedParameter("systemd.unit", ("host", "boot_target"), None),
    ]
    saver = memory.memory_saver
    if saver is not None:
        name = parameter_name(f"{saver.module}.{saver.packing_parameter}")
        parameters.append(TypedParameter(name, ("memory", "memory_saver", "packing"), None))
    return parameters


def rendered_kernel_args(baseline: Baseline) -> list[str]:
    """The command line sparkbase renders: fixed and typed arguments, then `cmdline_add`,
    without anything `cmdline_forbid` names (by name, or name=value)."""
    args = [*ALWAYS]
    args.extend(p.rendered for p in typed_parameters(baseline) if p.rendered is not None)
    for arg in baseline.kernel.cmdline_add:
        if arg not in args:
            args.append(arg)
    forbidden = set(baseline.kernel.cmdline_forbid)
    return [arg for arg in args if arg not in forbidden and arg.split("=")[0] not in forbidden]
