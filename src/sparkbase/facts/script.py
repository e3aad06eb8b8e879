"""The one-round-trip fact script: what to ask a node, as one POSIX sh script, and its answer.

`plan_for` turns a baseline (and the files rendered for the node) into a `FactPlan`: the
exact paths, sysctls, units, HCAs and packages to read. `build_script` turns a plan into
sections, each a command built from separately quoted words, wrapped so that the output
reads `<marker> BEGIN name`, the command's output (stderr merged), `<marker> END name rc`.
The marker carries a random nonce, so no file content can forge a section boundary.
`split_sections` is the pure inverse.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkbase.model.baseline import Baseline

RDMA_CLASS = "/sys/class/infiniband"
THP_PATH = "/sys/kernel/mm/transparent_hugepage/enabled"
GOVERNOR_GLOB = "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"
DISPLAY_MANAGER = "display-manager.service"
DPKG_FORMAT = "${Package}\t${Version}\t${db:Status-Abbrev}\n"


@dataclass(frozen=True)
class FactPlan:
    """Exactly what to read on one node, derived from the baseline it should carry."""

    sysctls: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    slice_unit: str | None = None
    hashed_paths: tuple[str, ...] = ()
    nccl_library_path: str | None = None
    nccl_conf_path: str = "/etc/nccl.conf"
    stamp_path: str = "/etc/sparkbase/stamp.json"
    hcas: tuple[str, ...] = ()
    gid_index: int = 3
    module_params: tuple[tuple[str, str], ...] = ()  # (module, parameter)
    memory_saver_module: str | None = None
    swap_paths: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    mok_keys: bool = True  # list enrolled MOK keys (only when the baseline names one)
    core_only: bool = False  # only kernel release, machine and page size (triggers' evidence)


def plan_for(baseline: Baseline, file_paths: Sequence[str], stamp_path: str,
             foreign_packages: Sequence[str] = ()) -> FactPlan:
    """The facts a node must report to be judged against `baseline` (and whether the
    `foreign_packages` other baselines pin are installed)."""
    host = baseline.host
    units = [DISPLAY_MANAGER, *host.disable_services]
    if host.fan_control is not None:
        units.append(host.fan_control.service)
    params = [("nvidia_drm", "modeset"), ("nvidia_drm", "fbdev")]
    saver = baseline.memory.memory_saver
    if saver is not None:
        params.append((saver.module, saver.packing_parameter))
    swap = baseline.memory.swap
    hashed = [baseline.nccl.library.path, *(path for path in file_paths if path != stamp_path)]
    return FactPlan(
        sysctls=tuple(sorted(baseline.memory.sysctls)),
        units=tuple(dict.fromkeys(units)),
        slice_unit=baseline.cpuset.slice,
        hashed_paths=tuple(dict.fromkeys(hashed)),
        nccl_library_path=baseline.nccl.library.path,
        stamp_path=stamp_path,
        hcas=tuple(baseline.fabric.hca_names()),
        gid_index=baseline.fabric.gid_index,
        module_params=tuple(params),
        memory_saver_module=saver.module if saver is not None else None,
        swap_paths=(swap.path,) if swap is not None else (),
        packages=tuple(dict.fromkeys([*(pin.name for pin in baseline.packages()), *foreign_packages])),
        mok_keys=baseline.secure_boot.mok_fingerprint is not None,
    )


def sysctl_path(key: str) -> str:
    """`vm.min_free_kbytes` → `/proc/sys/vm/min_free_kbytes`."""
    return "/proc/sys/" + key.replace(".", "/")


def gid_paths(hca: str, index: int) -> tuple[str, str]:
    """The GID text and GID type files of port 1 of `hca` at `index`."""
    port = f"{RDMA_CLASS}/{hca}/ports/1"
    return f"{port}/gids/{index}", f"{port}/gid_attrs/types/{index}"


def _cmd(*argv: str) -> str:
    """One command line from separately quoted words."""
    return " ".join(shlex.quote(arg) for arg in argv)


def _header_bytes(path: str, end: int) -> str:
    """The 10 bytes ending at `end` in `path`, non-alphanumerics shown as dots."""
    return _cmd("dd", f"if={path}", "bs=1", f"skip={end - 10}", "count=10", "status=none") + (
        " | " + _cmd("tr", "-c", "A-Z0-9", ".")
    )


def sections(plan: FactPlan) -> list[tuple[str, str]]:
    """(section name, command line) for every fact the plan asks for, in order."""
    out: list[tuple[str, str]] = [
        ("uname", _cmd("uname", "-r", "-m")),
        ("pagesize", _cmd("getconf", "PAGESIZE")),
        ("cmdline", _cmd("cat", "/proc/cmdline")),
        ("cpuinfo", _cmd("cat", "/proc/cpuinfo")),
        ("thp", _cmd("cat", THP_PATH)),
        (
            "nvidia-smi",
            _cmd(
                "nvidia-smi",
                "--query-gpu=driver_version,clocks.sm,power.draw",
                "--format=csv,noheader,nounits",
            ),
        ),
        # /proc/modules, else /sys/module (kernels without /proc/modules; same first column)
        ("modules", _cmd("cat", "/proc/modules") + " 2>/dev/null || " + _cmd("ls", "-1", "/sys/module")),
        ("sb-state", _cmd("mokutil", "--sb-state")),
        ("default-target", _cmd("systemctl", "get-default")),
        ("ip-addr", _cmd("ip", "-j", "addr", "show")),
        ("rdma", _cmd("ls", "-1", RDMA_CLASS)),
        ("governors", _cmd("grep", "-H", ".") + " " + GOVERNOR_GLOB),
        ("stamp", _cmd("cat", plan.stamp_path)),
        ("nccl-conf", _cmd("cat", plan.nccl_conf_path)),
    ]
    if plan.core_only:
        return out[:2]
    if plan.mok_keys:
        out.append(("mok-enrolled", _cmd("mokutil", "--list-enrolled")))
    for key in plan.sysctls:
        out.append((f"sysctl:{key}", _cmd("cat", sysctl_path(key))))
    for module, param in plan.module_params:
        out.append((f"param:{module}.{param}", _cmd("cat", f"/sys/module/{module}/parameters/{param}")))
    units = [*plan.units, *([plan.slice_unit] if plan.slice_unit else [])]
    if units:
        out.append(
            (
                "units",
                _cmd(
                    "systemctl",
                    "show",
                    "-p",
                    "UnitFileState",
                    "-p",
                    "ActiveState",
                    "-p",
                    "AllowedCPUs",
                    *units,
                ),
            )
        )
    if plan.hashed_paths:
        out.append(("sha256", _cmd("sha256sum", "--", *plan.hashed_paths)))
    for hca in plan.hcas:
        gid, gid_type = gid_paths(hca, plan.gid_index)
        out.append((f"gid:{hca}", _cmd("cat", gid)))
        out.append((f"gidtype:{hca}", _cmd("cat", gid_type)))
    if plan.memory_saver_module:
        out.append(("dkms", _cmd("dkms", "status")))
        out.append(("modinfo", _cmd("modinfo", plan.memory_saver_module)))
    if plan.swap_paths:
        out.append(("swapon", _cmd("swapon", "--show=NAME,SIZE", "--bytes", "--noheadings")))
    for path in plan.swap_paths:
        out.append((f"swaphdr4k:{path}", _header_bytes(path, 4096)))
        out.append((f"swaphdr64k:{path}", _header_bytes(path, 65536)))
    if plan.packages:
        out.append(("dpkg", _cmd("dpkg-query", "-W", f"-f={DPKG_FORMAT}", *plan.packages)))
    return out


def new_marker() -> str:
    """A section marker no file on the node can contain by accident or on purpose."""
    return f"@@sparkbase-facts-{secrets.token_hex(8)}@@"


def build_script(plan: FactPlan, marker: str) -> str:
    """The POSIX sh script: every section's command, fenced by the marker, stdin closed."""
    lines = [
        "#!/bin/sh",
        "export LC_ALL=C",
        f"M={shlex.quote(marker)}",
        'b() { printf \'%s BEGIN %s\\n\' "$M" "$1"; }',
        'e() { printf \'\\n%s END %s %s\\n\' "$M" "$1" "$2"; }',
    ]
    for name, command in sections(plan):
        quoted = shlex.quote(name)
        lines.append(f"b {quoted}; {{ {command}; }} </dev/null 2>&1; e {quoted} $?")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Section:
    """One section of the answer: the command's output and exit status."""

    output: str
    status: int


@dataclass
class Sections:
    """The parsed answer: sections by name."""

    by_name: dict[str, Section] = field(default_factory=dict)

    def get(self, name: str) -> Section | None:
        """The section called `name`, if the node answered it."""
        return self.by_name.get(name)


def split_sections(text: str, marker: str) -> Sections:
    """Split the script's output into sections (pure; the inverse of `build_script`)."""
    found = Sections()
    pattern = re.compile(
        rf"^{re.escape(marker)} BEGIN (?P<name>[^\n]+)\n(?P<body>.*?)\n"
        rf"{re.escape(marker)} END (?P=name) (?P<rc>\d+)$",
        re.DOTALL | re.MULTILINE,
    )
    for match in pattern.finditer(text):
        found.by_name[match["name"]] = Section(output=match["body"], status=int(match["rc"]))
    return found
