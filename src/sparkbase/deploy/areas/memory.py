"""Memory (section `memory`): live sysctls, the installer's and the baseline's swap files,
other baselines' swap retired, transparent hugepages."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sparkbase.deploy.areas.activation import DaemonReload
from sparkbase.deploy.areas.files import FileRetire
from sparkbase.deploy.areas.units import UnitEnabled, UnitRetire
from sparkbase.deploy.kinds import NodeReads, Recorded, Step, StepArgs
from sparkbase.model.memory import BOOT_SWAP_SCRIPT, BOOT_SWAP_UNIT, BOOT_SWAP_UNIT_FILE
from sparkbase.policy.foreign import foreign_fstab_edits, foreign_swap_files
from sparkbase.policy.fstab import FSTAB
from sparkbase.render import FSTAB_PATH, SYSCTL_PATH, managed_lines, swap_fstab_line, sysctls

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta

    from sparkbase.model.baseline import Baseline
    from sparkbase.model.site import Site


class SysctlApply(StepArgs, kind="sysctl-apply"):
    """`sysctl -p FILE` when the live values differ from `values`."""

    file: str
    values: dict[str, str]

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.sysctls += list(self.values)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.memory import sysctl_apply
        return sysctl_apply(name=name, file=self.file, values=self.values)


class FactorySwap(Recorded, kind="factory-swap"):
    """The installer's swap file kept, its /etc/fstab line set to `fstab` (switched off first
    when `swapoff`)."""

    path: str
    fstab: str
    swapoff: bool

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.states.append(FSTAB)
        into.texts.append(FSTAB)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.memory import factory_swap
        return factory_swap(name=name, path=self.path, fstab=self.fstab, swapoff=self.swapoff,
                            baseline=self.baseline)


class FactorySwapRestore(StepArgs, kind="factory-swap-restore"):
    """The installer's swap line put back as sparkbase found it."""

    path: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.states.append(FSTAB)
        into.texts.append(FSTAB)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.memory import factory_swap_restore
        return factory_swap_restore(name=name, path=self.path)


class FactorySwapon(StepArgs, kind="factory-swapon"):
    """The installer's swap file switched on, when the running page size is its header's."""

    path: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.swaps.append(self.path)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.memory import factory_swapon
        return factory_swapon(name=name, path=self.path)


class SwapFile(Recorded, kind="swap-file"):
    """A swap file of `size_gib` with a `header_page_size`-byte header."""

    path: str
    size_gib: int
    header_page_size: int

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.swaps.append(self.path)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.memory import swap_file
        return swap_file(name=name, path=self.path, size_gib=self.size_gib,
                         header_page_size=self.header_page_size, baseline=self.baseline)


class FstabLine(StepArgs, kind="fstab-line"):
    """The line matching `match` (an extended regex) in the file at `path` is `line`."""

    path: str
    line: str
    match: str

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from pyinfra.operations.files import line
        return line(name=name, path=self.path, line=self.match, replace=self.line,
                    extended_regex=True)


class FstabLineAbsent(StepArgs, kind="fstab-line-absent"):
    """No line matches `match` (an extended regex) in the file at `path`."""

    path: str
    match: str

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from pyinfra.operations.files import line
        return line(name=name, path=self.path, line=self.match, present=False,
                    extended_regex=True)


class Swapon(StepArgs, kind="swapon"):
    """The swap file switched on, when the running page size is `header_page_size`."""

    path: str
    header_page_size: int

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.memory import swapon
        return swapon(name=name, path=self.path, header_page_size=self.header_page_size)


class Thp(StepArgs, kind="thp"):
    """Transparent hugepages set to `value` in the running kernel."""

    value: str

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.memory import thp
        return thp(name=name, value=self.value)


class SwapRetire(StepArgs, kind="swap-retire"):
    """Another baseline's swap file switched off, unlisted and deleted."""

    path: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.texts.append(FSTAB)
        into.swaps.append(self.path)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import swap_retire
        return swap_retire(name=name, path=self.path)



def sysctl_step(baseline: Baseline) -> Step:
    """`sysctl -p` of the rendered file when the live values differ from the baseline's."""
    return Step(SysctlApply(file=SYSCTL_PATH, values=sysctls(baseline)),
                f"sysctl -p {SYSCTL_PATH} (live values differ)", section="memory")


def thp_step(baseline: Baseline) -> Step:
    """Transparent hugepages set in the running kernel."""
    value = baseline.memory.transparent_hugepages
    return Step(Thp(value=value), f"transparent hugepages {value} (live)", section="memory")


def retire_boot_swap(owners: tuple[str, ...]) -> list[Step]:
    """Other baselines' boot swap unit: disabled first (it is not run at the next boot),
    then it and its script removed, each only if sparkbase recorded making it unchanged."""
    if not owners:
        return []
    return [
        Step(UnitRetire(unit=BOOT_SWAP_UNIT),
             f"retire: {BOOT_SWAP_UNIT} disabled (run only by {', '.join(owners)})", section="memory"),
        *(Step(FileRetire(path=path), f"retire: {path} (rendered only by {', '.join(owners)})",
               section="memory") for path in (BOOT_SWAP_UNIT_FILE, BOOT_SWAP_SCRIPT)),
    ]


def swap_steps(site: Site, baseline: Baseline) -> list[Step]:
    """The installer's swap line first (its edits rewrite /etc/fstab whole, guarded), then
    other baselines' swap files retired, then this baseline's swap file."""
    swap = baseline.memory.swap
    steps = [
        Step(FactorySwapRestore(path=path), f"retire: the {path} line of /etc/fstab as sparkbase "
             "found it (another baseline had it marked noauto)", section="memory")
        for path in foreign_fstab_edits(site, baseline)
    ]
    steps += _factory_swap_steps(baseline)
    steps += [
        Step(SwapRetire(path=path), f"retire: swap file {path} (another baseline's)", section="memory")
        for path in foreign_swap_files(site, baseline)
    ]
    if swap is None:
        return steps
    size = swap.header_page_size
    steps.append(Step(SwapFile(path=swap.path, size_gib=swap.size_gib, header_page_size=size),
                      f"swap file {swap.path} ({swap.size_gib} GiB, {size}-byte header)", section="memory"))
    if baseline.memory.swap_by_page_size:
        steps += _boot_swap_line_steps(swap.path)
    else:
        line = managed_lines(baseline)[0]
        steps.append(Step(FstabLine(path=line.path, line=line.line, match=line.match),
                          f"{line.path}: {line.line}", section=line.section))
    steps.append(Step(Swapon(path=swap.path, header_page_size=size),
                      f"swapon {swap.path} (when running {size}-byte pages)", section="memory"))
    if baseline.memory.swap_by_page_size:
        steps += _boot_swap_unit_steps(baseline)
    return steps


def _boot_swap_line_steps(path: str) -> list[Step]:
    """Under `swap_by_page_size` the boot unit activates the swap file: the exact /etc/fstab
    line sparkbase wrote for it before (`PATH none swap sw 0 0`) goes, any other line is kept."""
    line = swap_fstab_line(path)
    return [Step(FstabLineAbsent(path=FSTAB_PATH, match=f"^{_ere_literal(line)}$"),
                 f"{FSTAB_PATH}: no '{line}' line (the boot unit swaps on {path})", section="memory")]


def _ere_literal(text: str) -> str:
    """`text` as a POSIX extended regular expression matching it literally (grep -E and sed
    -E warn about Python's `re.escape` of '-' and spaces)."""
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", text)


def _boot_swap_unit_steps(baseline: Baseline) -> list[Step]:
    """systemd loads the boot swap unit as rendered, then it is enabled (recorded)."""
    choices = ", ".join(f"{path} on {size}-byte pages" for size, path in baseline.memory.swap_files().items())
    return [
        Step(DaemonReload(unit=BOOT_SWAP_UNIT),
             f"systemctl daemon-reload (systemd has not loaded {BOOT_SWAP_UNIT} as on disk)",
             after_change_of=BOOT_SWAP_UNIT_FILE, section="memory"),
        Step(UnitEnabled(unit=BOOT_SWAP_UNIT),
             f"{BOOT_SWAP_UNIT} enabled and run (swap at boot: {choices})", section="memory"),
    ]


def _factory_swap_steps(baseline: Baseline) -> list[Step]:
    """The installer's swap file: its fstab line marked noauto (recorded), or, kept as
    installed, switched on as the node's swap."""
    factory = baseline.memory.factory_swap
    if factory is None:
        return []
    if factory.fstab == "noauto":
        off = ", switched off when active" if factory.swapoff else ""
        args = FactorySwap(path=factory.path, fstab=factory.fstab, swapoff=factory.swapoff)
        name = f"{factory.path} kept, its /etc/fstab line marked noauto{off} (recorded)"
        return [Step(args, name, section="memory")]
    return [Step(FactorySwapon(path=factory.path), f"swapon {factory.path} (the installer's swap, when "
                 "the running page size is its header's)", section="memory")]
