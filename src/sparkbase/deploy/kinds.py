"""Every kind of deploy step, declared once: its name, typed arguments, what its operation
reads of the node, and the pyinfra operation it adds.

A kind is a frozen dataclass of its operation's arguments, named in its class line
(`class Thp(StepArgs, kind="thp")`), which registers it in `KINDS`. Two bases say what a
kind does beyond its operation: `Recorded`, its operation records what it creates on the
node under the baseline's name (`sparkbase.policy.ownership`: only recorded things are
ever retired); `Writes`, it writes a whole file, or its part of one, at `path` (a later
follow-up step names the path in `Step.after_change_of` and is given that file's operation
as its `trigger`). `reads` adds the paths, units, packages and kernels the operation decides
on to the node's one read (`NodeReads`, made one fact script by `deploy.reads.fact_plan`).
`add` calls the operation with every argument by name, so mypy checks each one from the
step builders (`steps.py`) to the operation's signature.

Each `add` imports its operation where it calls it: steps are built with no pyinfra (and
no host), and `deploy.session` builds them before it lets gevent patch the standard
library, which must come before pyinfra (and the ssl and paramiko it imports) is loaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sparkbase.facts.parsers.fabric import Fabric
from sparkbase.facts.parsers.kernel import GRUB_CFG
from sparkbase.policy.fstab import FSTAB

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta

#: kind name -> its arguments' class (every concrete kind, in the order they are declared)
KINDS: dict[str, type[StepArgs]] = {}


@dataclass
class NodeReads:
    """What a node's steps read of it while they are planned, collected in step order (each
    kind adds its own, `StepArgs.reads`); `deploy.reads.fact_plan` makes it one fact script."""

    states: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    units: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    sysctls: list[str] = field(default_factory=list)
    newer: list[tuple[str, str]] = field(default_factory=list)
    reload: list[str] = field(default_factory=list)
    modinfo: list[tuple[str, str]] = field(default_factory=list)
    sources: list[tuple[str, str]] = field(default_factory=list)
    swaps: list[str] = field(default_factory=list)
    initramfs: list[tuple[str, str]] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)
    netplan: bool = False


@dataclass(frozen=True, kw_only=True)
class StepArgs(ABC):
    """One step kind's arguments; its class is the kind (`kind` names it)."""

    #: the kind's name, as plans, results and the deploy cases show it
    kind: ClassVar[str]

    def __init_subclass__(cls, kind: str = "", **rest: Any) -> None:
        super().__init_subclass__(**rest)
        if kind in KINDS:
            raise TypeError(f"step kind {kind} declared twice ({KINDS[kind].__name__}, {cls.__name__})")
        if kind:
            cls.kind = kind
            KINDS[kind] = cls

    @abstractmethod
    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        """Add the kind's pyinfra operation for the host in context, named `name`; `trigger`
        is the operation of the file step it follows (`Step.after_change_of`), if any."""

    def reads(self, into: NodeReads, secret: bool) -> None:
        """Add to `into` what the kind's operation reads of the node while it is planned,
        beyond the state every plan reads (boot, MOK, holds, swaps, the ownership record);
        `secret`: the step's content must never be read back. Most kinds read nothing more."""
        return None

    def as_dict(self) -> dict[str, Any]:
        """The arguments by name (what a plan summary shows)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass(frozen=True, kw_only=True)
class Recorded(StepArgs):
    """A kind whose operation records what it creates on the node, under the baseline's
    name (`build_steps` sets it): only recorded things are ever retired."""

    baseline: str = ""


@dataclass(frozen=True, kw_only=True)
class Writes(StepArgs):
    """A kind that writes a whole file, or its part of one, at `path`."""

    path: str


# --- packages -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AptUpdate(StepArgs, kind="apt-update"):
    """`apt-get update`, only when one of `pins` (NAME=VERSION) is not installed."""

    pins: list[str]

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.packages += [pin.partition("=")[0] for pin in self.pins]

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.packages import apt_update_for
        return apt_update_for(name=name, pins=self.pins)


@dataclass(frozen=True, kw_only=True)
class Packages(Recorded, kind="packages"):
    """The pinned packages (NAME=VERSION) installed at their exact versions."""

    pins: list[str]

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.packages += [pin.partition("=")[0] for pin in self.pins]

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.packages import pinned_packages
        return pinned_packages(name=name, pins=self.pins, baseline=self.baseline)


@dataclass(frozen=True, kw_only=True)
class Hold(StepArgs, kind="hold"):
    """The packages held at their versions."""

    names: list[str]

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.packages import hold
        return hold(name=name, names=self.names)


# --- files and the MOK key pair -----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Directory(Recorded, kind="directory"):
    """A directory with its mode."""

    path: str
    mode: int

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.states.append(self.path)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.files import directory
        return directory(name=name, path=self.path, mode=self.mode, baseline=self.baseline)


@dataclass(frozen=True, kw_only=True)
class Upload(Recorded, kind="upload"):
    """A local file (the operator's, e.g. the MOK key pair) uploaded to `path`."""

    path: str
    local: str
    mode: int

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.states.append(self.path)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.files import upload
        sha256 = hashlib.sha256(Path(self.local).read_bytes()).hexdigest()
        return upload(name=name, path=self.path, local=self.local, mode=self.mode, sha256=sha256,
                      baseline=self.baseline)


@dataclass(frozen=True, kw_only=True)
class MokImport(StepArgs, kind="mok-import"):
    """The MOK certificate imported for enrolment at the next boot."""

    certificate: str
    fingerprint: str

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.secure_boot import mok_import
        return mok_import(name=name, certificate=self.certificate, fingerprint=self.fingerprint)


@dataclass(frozen=True, kw_only=True)
class File(Writes, Recorded, kind="file"):
    """A rendered file, byte for byte, with its mode."""

    content: str
    mode: int

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.states.append(self.path)
        if not secret:
            into.texts.append(self.path)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.files import file
        return file(name=f"file {self.path}", path=self.path, content=self.content, mode=self.mode,
                    sha256=hashlib.sha256(self.content.encode()).hexdigest(), baseline=self.baseline)


# --- DKMS modules -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DkmsSource(Recorded, kind="dkms-source"):
    """A DKMS module's source fetched from `url`, checked against `sha256`, added to dkms."""

    dkms_name: str
    version: str
    url: str
    sha256: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.sources.append((self.dkms_name, self.version))

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.dkms import dkms_source
        return dkms_source(name=name, dkms_name=self.dkms_name, version=self.version, url=self.url,
                           sha256=self.sha256, baseline=self.baseline)


@dataclass(frozen=True, kw_only=True)
class DkmsInstall(Recorded, kind="dkms-install"):
    """A DKMS module built for `kernel` and signed with the MOK `fingerprint` (None: unsigned)."""

    dkms_name: str
    version: str
    kernel: str
    module: str
    fingerprint: str | None

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.modinfo.append((self.kernel, self.module))

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.dkms import dkms_install
        return dkms_install(name=name, dkms_name=self.dkms_name, version=self.version, kernel=self.kernel,
                            module=self.module, fingerprint=self.fingerprint, baseline=self.baseline)


# --- retiring what other baselines put on the node ----------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DkmsRetire(StepArgs, kind="dkms-retire"):
    """Another baseline's DKMS module removed, for every kernel."""

    dkms_name: str
    version: str

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import dkms_retire
        return dkms_retire(name=name, dkms_name=self.dkms_name, version=self.version)


@dataclass(frozen=True, kw_only=True)
class PackagesRetire(StepArgs, kind="packages-retire"):
    """Other baselines' packages unheld and purged (a kernel's only once `target_kernel` runs)."""

    names: list[str]
    target_kernel: str | None

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.packages += self.names

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import packages_retire
        return packages_retire(name=name, names=self.names, target_kernel=self.target_kernel)


@dataclass(frozen=True, kw_only=True)
class PackagesKept(StepArgs, kind="packages-kept"):
    """Other baselines' packages sparkbase did not install, reported."""

    names: list[str]

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.packages += self.names

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import packages_kept
        return packages_kept(name=name, names=self.names)


@dataclass(frozen=True, kw_only=True)
class MokDirRetire(StepArgs, kind="mok-dir-retire"):
    """Another baseline's MOK key directory removed."""

    path: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.entries.append(self.path)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import mok_dir_retire
        return mok_dir_retire(name=name, path=self.path)


@dataclass(frozen=True, kw_only=True)
class MokKept(StepArgs, kind="mok-kept"):
    """The MOK keys other baselines enrolled, reported (they stay in firmware)."""

    fingerprints: list[str]

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import mok_kept
        return mok_kept(name=name, fingerprints=self.fingerprints)


@dataclass(frozen=True, kw_only=True)
class UnitRetire(StepArgs, kind="unit-retire"):
    """Another baseline's unit disabled and stopped."""

    unit: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.units.append(self.unit)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import unit_retire
        return unit_retire(name=name, unit=self.unit)


@dataclass(frozen=True, kw_only=True)
class FileRetire(StepArgs, kind="file-retire"):
    """A file only other baselines render, removed."""

    path: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.states.append(self.path)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import file_retire
        return file_retire(name=name, path=self.path)


@dataclass(frozen=True, kw_only=True)
class SwapRetire(StepArgs, kind="swap-retire"):
    """Another baseline's swap file switched off, unlisted and deleted."""

    path: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.texts.append(FSTAB)
        into.swaps.append(self.path)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import swap_retire
        return swap_retire(name=name, path=self.path)


# --- host: nvidia-drm modeset, services, tuning -------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ModesetPurge(Recorded, kind="modeset-purge"):
    """The nvidia-drm modeset options package purged, every initramfs rebuilt."""

    package: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.packages.append(self.package)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.host import modeset_purge
        return modeset_purge(name=name, package=self.package, baseline=self.baseline)


@dataclass(frozen=True, kw_only=True)
class ModesetRestore(StepArgs, kind="modeset-restore"):
    """The modeset options package sparkbase purged for another baseline, put back."""

    package: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.packages.append(self.package)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.host import modeset_restore
        return modeset_restore(name=name, package=self.package)


@dataclass(frozen=True, kw_only=True)
class DefaultTarget(StepArgs, kind="default-target"):
    """The systemd target the node boots into."""

    target: str

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.host import default_target
        return default_target(name=name, target=self.target)


@dataclass(frozen=True, kw_only=True)
class UnitDisabled(StepArgs, kind="unit-disabled"):
    """A unit neither enabled nor running."""

    unit: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.units.append(self.unit)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.units import unit_disabled
        return unit_disabled(name=name, unit=self.unit)


@dataclass(frozen=True, kw_only=True)
class UnitEnabled(Recorded, kind="unit-enabled"):
    """A unit enabled and running."""

    unit: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.units.append(self.unit)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.units import unit_enabled
        return unit_enabled(name=name, unit=self.unit, baseline=self.baseline)


@dataclass(frozen=True, kw_only=True)
class CpuGovernor(StepArgs, kind="cpu-governor"):
    """Every CPU runs `governor` (DGX OS's governor unit)."""

    governor: str
    release: str

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.host import cpu_governor
        return cpu_governor(name=name, governor=self.governor, release=self.release)


@dataclass(frozen=True, kw_only=True)
class NvmeCoalescing(Recorded, kind="nvme-coalescing"):
    """NVMe interrupt coalescing on or off (off masks the vendor unit, recorded)."""

    on: bool

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.host import nvme_coalescing
        return nvme_coalescing(name=name, on=self.on, baseline=self.baseline)


# --- fabric netplan -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class NetplanFiles(StepArgs, kind="netplan-files"):
    """Only the netplan file at `path` configures the fabric `interfaces`."""

    path: str
    interfaces: list[str]

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.netplan = True

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.fabric import netplan_files
        return netplan_files(name=name, path=self.path, interfaces=self.interfaces)


@dataclass(frozen=True, kw_only=True)
class NetplanTakeover(Writes, Recorded, kind="netplan-takeover"):
    """The fabric ports' keys merged into the site's netplan file at `path`."""

    fabric: Fabric
    mode: int

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.states.append(self.path)
        into.netplan = True

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.fabric import netplan_takeover
        return netplan_takeover(name=name, path=self.path, fabric=self.fabric, mode=self.mode,
                                baseline=self.baseline)


# --- activation: what makes a written file take effect ------------------------------------------


@dataclass(frozen=True, kw_only=True)
class GrubUpdate(StepArgs, kind="grub-update"):
    """`update-grub` when the drop-in changed or grub.cfg does not boot the baseline."""

    release: str
    default_entry: str | None
    cmdline: list[str]
    forbid: list[str]
    fallback: str | None
    dropin: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.newer.append((self.dropin, GRUB_CFG))

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.kernel import grub_update
        return grub_update(name=name, trigger=trigger, release=self.release,
                           default_entry=self.default_entry, cmdline=self.cmdline, forbid=self.forbid,
                           fallback=self.fallback, dropin=self.dropin)


@dataclass(frozen=True, kw_only=True)
class SysctlApply(StepArgs, kind="sysctl-apply"):
    """`sysctl -p FILE` when the live values differ from `values`."""

    file: str
    values: dict[str, str]

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.sysctls += list(self.values)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.memory import sysctl_apply
        return sysctl_apply(name=name, file=self.file, values=self.values)


@dataclass(frozen=True, kw_only=True)
class DaemonReload(StepArgs, kind="daemon-reload"):
    """`systemctl daemon-reload` when systemd has not loaded `unit` as on disk."""

    unit: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.reload.append(self.unit)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.activation import daemon_reload
        return daemon_reload(name=name, trigger=trigger, unit=self.unit)


@dataclass(frozen=True, kw_only=True)
class NetplanApply(StepArgs, kind="netplan-apply"):
    """`netplan apply` when the live fabric `links` (netdev -> mtu, addresses) differ."""

    links: dict[str, dict[str, Any]]

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.activation import netplan_apply
        return netplan_apply(name=name, trigger=trigger, links=self.links)


@dataclass(frozen=True, kw_only=True)
class InitramfsUpdate(StepArgs, kind="initramfs-update"):
    """`update-initramfs -u -k all` when the `release` image lacks the modprobe file's options."""

    release: str
    path: str
    sha256: str | None

    def reads(self, into: NodeReads, secret: bool) -> None:
        if self.sha256 is not None:
            into.initramfs.append((self.release, self.path))

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.activation import initramfs_update
        return initramfs_update(name=name, trigger=trigger, release=self.release, path=self.path,
                                sha256=self.sha256)


# --- memory: swap and transparent hugepages -----------------------------------------------------


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class FactorySwapRestore(StepArgs, kind="factory-swap-restore"):
    """The installer's swap line put back as sparkbase found it."""

    path: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.states.append(FSTAB)
        into.texts.append(FSTAB)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.memory import factory_swap_restore
        return factory_swap_restore(name=name, path=self.path)


@dataclass(frozen=True, kw_only=True)
class FactorySwapon(StepArgs, kind="factory-swapon"):
    """The installer's swap file switched on, when the running page size is its header's."""

    path: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.swaps.append(self.path)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.memory import factory_swapon
        return factory_swapon(name=name, path=self.path)


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class FstabLine(StepArgs, kind="fstab-line"):
    """The line matching `match` (an extended regex) in the file at `path` is `line`."""

    path: str
    line: str
    match: str

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from pyinfra.operations.files import line
        return line(name=name, path=self.path, line=self.match, replace=self.line,
                    extended_regex=True)


@dataclass(frozen=True, kw_only=True)
class FstabLineAbsent(StepArgs, kind="fstab-line-absent"):
    """No line matches `match` (an extended regex) in the file at `path`."""

    path: str
    match: str

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from pyinfra.operations.files import line
        return line(name=name, path=self.path, line=self.match, present=False,
                    extended_regex=True)


@dataclass(frozen=True, kw_only=True)
class Swapon(StepArgs, kind="swapon"):
    """The swap file switched on, when the running page size is `header_page_size`."""

    path: str
    header_page_size: int

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.memory import swapon
        return swapon(name=name, path=self.path, header_page_size=self.header_page_size)


@dataclass(frozen=True, kw_only=True)
class Thp(StepArgs, kind="thp"):
    """Transparent hugepages set to `value` in the running kernel."""

    value: str

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.memory import thp
        return thp(name=name, value=self.value)
