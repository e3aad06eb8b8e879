"""What a node is: typed facts gathered in one SSH round trip.

Every field is what the node said, parsed; `None` means the node could not tell (the
command failed or the file was missing) and `errors` says why. Facts never hold what the
node *should* be: that is the baseline's job, and comparing the two is the audit's.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, Any, NamedTuple

from sparkbase.transport.failure import FailureKind

if TYPE_CHECKING:
    from sparkbase.facts.parsers.docker import Container
    from sparkbase.facts.parsers.host import ConsoleMode, DrmClient, EfiBoot
    from sparkbase.facts.runtime import ServingProcess
    from sparkbase.model.ownership import Entry, OwnershipRecord


@dataclass(frozen=True)
class GpuFacts:
    """`nvidia-smi --query-gpu=driver_version,clocks.sm,power.draw,utilization.gpu,
    clocks_event_reasons.active` (one reading, one round trip), or why it failed."""

    driver_version: str | None = None
    sm_clock_mhz: int | None = None
    power_w: float | None = None
    error: str | None = None
    utilization_pct: int | None = None
    #: NVML's clock-event reasons bitmask (nvmlClocksEventReason*); 0 = none reported
    event_reasons: int | None = None


@dataclass(frozen=True)
class ModuleInfo:
    """`modinfo NAME` fields of one kernel module file, as kmod prints them.

    `sig_key` is what kmod prints under that name: the **serial number** of the signing
    certificate (colon-hex), not its fingerprint; `signer` is that certificate's issuer CN.
    """

    filename: str | None = None
    version: str | None = None
    vermagic: str | None = None
    srcversion: str | None = None  # hex digest of the module's sources (upper case, as printed)
    signer: str | None = None
    sig_key: str | None = None  # signing certificate's serial, as printed (colon-hex)
    sig_hashalgo: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class DkmsEntry:
    """One `dkms status` line: `name/version, kernel, arch: status` (DKMS 3) or
    `name, version, kernel, arch: status` (DKMS 2)."""

    name: str
    version: str
    kernel: str | None
    arch: str | None
    status: str
    #: what DKMS appends after the state, in order, without the parentheses:
    #: `original_module exists`, `WARNING! Diff between built and installed module!`
    notes: tuple[str, ...] = ()

    @property
    def warnings(self) -> tuple[str, ...]:
        """The notes in which DKMS warns that what is installed is not what it built
        (`WARNING! Diff between built and installed module!`, `WARNING! Missing some built
        modules!`); `original_module exists` is no warning."""
        return tuple(note for note in self.notes if note.upper().startswith("WARNING"))

    @property
    def installed(self) -> bool:
        """DKMS installed the module it built: state `installed` and no warning beside it."""
        return self.status == "installed" and not self.warnings

    @property
    def shown(self) -> str:
        """The state as DKMS printed it, notes included: `installed (WARNING! …)`."""
        return " ".join([self.status, *(f"({note})" for note in self.notes)])


@dataclass(frozen=True)
class DkmsStatus:
    """`dkms status`: the module lines, and every other line (warnings, errors about other
    packages' trees) kept as noise: reported, never fatal."""

    entries: tuple[DkmsEntry, ...] = ()
    noise: tuple[str, ...] = ()


class SecureBoot(StrEnum):
    """What `mokutil --sb-state` says about signature enforcement."""

    ENABLED = "enabled"
    #: `SecureBoot enabled` + `SecureBoot validation is disabled in shim`: nothing is enforced
    NOT_ENFORCING = "enabled, validation disabled in shim"
    DISABLED = "disabled"
    #: `SecureBoot disabled` + `Platform is in Setup Mode`: no platform key, nothing enforced
    SETUP_MODE = "disabled, setup mode"
    #: `EFI variables are not supported on this system` (legacy BIOS boot, or no efivarfs)
    UNSUPPORTED = "not supported (no EFI variables)"
    #: `This system doesn't support Secure Boot`: UEFI, but the firmware has no SecureBoot
    #: variable (it offers no Secure Boot at all), so nothing is ever enforced
    NO_SECURE_BOOT = "unsupported (the firmware has no Secure Boot)"

    @property
    def enforcing(self) -> bool:
        """Whether the firmware and shim refuse unsigned or wrongly signed modules."""
        return self is SecureBoot.ENABLED


@dataclass(frozen=True)
class MokCertificate:
    """One certificate of `mokutil --list-enrolled`: how the baseline pins it (SHA-1
    fingerprint) and how kmod names it in a module signature (serial, issuer CN)."""

    fingerprint: str  # sha1, lower-case colon-hex
    serial: str | None = None  # normalised: lower-case hex, no colons, no leading zeros
    issuer_cn: str | None = None
    subject_cn: str | None = None


@dataclass(frozen=True)
class SwapEntry:
    """One active swap area (`swapon --show=NAME,SIZE --bytes`)."""

    name: str
    size_bytes: int


@dataclass(frozen=True)
class UnitState:
    """systemd state of one unit (`systemctl show -p UnitFileState -p ActiveState`)."""

    unit_file_state: str
    active_state: str

    @property
    def enabled(self) -> bool:
        """Enabled the way `systemctl is-enabled` counts it (exit 0)."""
        return self.unit_file_state in {"enabled", "enabled-runtime", "alias", "static"}

    @property
    def active(self) -> bool:
        """Running (or starting) the way `systemctl is-active` counts it."""
        return self.active_state in {"active", "activating", "reloading"}


@dataclass(frozen=True)
class Interface:
    """One netdev from `ip -j addr show`."""

    name: str
    mtu: int
    operstate: str
    addresses: tuple[str, ...]  # IPv4 "a.b.c.d/prefix"


@dataclass(frozen=True)
class Gid:
    """One GID table entry of an RDMA port: GID text and its type (`RoCE v2`, ...)."""

    gid: str | None
    type: str | None

    @property
    def ipv4(self) -> str | None:
        """The IPv4 address an IPv4-mapped GID (`...:ffff:c0a8:0101`) carries, else None."""
        if self.gid is None:
            return None
        groups = self.gid.lower().split(":")
        if len(groups) != 8 or groups[:5] != ["0000"] * 5 or groups[5] != "ffff":
            return None
        try:
            high, low = int(groups[6], 16), int(groups[7], 16)
        except ValueError:
            return None
        return f"{high >> 8}.{high & 0xFF}.{low >> 8}.{low & 0xFF}"


@dataclass(frozen=True)
class GidEntry:
    """One filled entry of an RDMA port's GID table, read from sysfs: where it is (device,
    port, index), the GID and its type, and the netdev it belongs to (`gid_attrs/ndevs`)."""

    hca: str
    port: int
    index: int
    gid: Gid
    ndev: str | None

    @property
    def roce_v2_ipv4(self) -> str | None:
        """The IPv4 address this entry carries when it is a RoCE v2 entry, else None."""
        return self.gid.ipv4 if self.gid.type == "RoCE v2" else None


@dataclass(frozen=True)
class NetplanSource:
    """One `*.yaml` entry of a netplan directory: its exact text (None when not read: `problem`
    says why), the sha256 of its bytes, its mode and whether the name is a symbolic link."""

    path: str
    text: str | None
    sha256: str | None = None
    mode: int | None = None
    link: bool = False
    problem: str = ""

    @property
    def name(self) -> str:
        """The file's name, by which netplan shadows and orders it."""
        return posixpath.basename(self.path)


@dataclass(frozen=True)
class NetplanListing:
    """What the node's netplan directories hold, in the order listed, and whether more files
    were there than read (`more`: they are unknown, so anything may be configured)."""

    sources: tuple[NetplanSource, ...] = ()
    more: bool = False

    def get(self, path: str) -> NetplanSource | None:
        """The entry at `path`, if listed."""
        return next((source for source in self.sources if source.path == path), None)


@dataclass(frozen=True)
class GrubEntry:
    """One bootable GRUB menu entry: its menu path and the kernel it boots."""

    path: str  # titles from the top menu, `Submenu>Title`
    release: str | None  # from its `linux /boot/vmlinuz-<release>` (or `/vmlinuz-…`) line
    recovery: bool = False
    ident: str | None = None  # its `$menuentry_id_option 'gnulinux-…'` id
    args: tuple[str, ...] = ()  # kernel arguments on its `linux` line


@dataclass(frozen=True)
class GrubBoot:
    """What GRUB will boot, from /boot/grub/grub.cfg and /boot/grub/grubenv as GRUB reads them.

    `default` is the normal boot (`set default=...`, `${saved_entry}` read from grubenv,
    as `GRUB_DEFAULT=saved` writes it); `oneshot` is a `grub-reboot` entry (`next_entry`)
    the next boot alone takes, when grub.cfg honours it (Ubuntu's does).
    """

    entries: tuple[GrubEntry, ...]
    default: str
    default_entry: GrubEntry | None
    oneshot: str | None = None
    oneshot_entry: GrubEntry | None = None


@dataclass(frozen=True)
class FstabEntry:
    """One /etc/fstab line: what, where, type, options."""

    spec: str
    file: str
    vfstype: str
    options: str


class Found(Enum):
    """What is at a path, read without following a symbolic link there."""

    REGULAR = "regular file"
    SYMLINK = "symbolic link"
    DIRECTORY = "directory"
    OTHER = "other"


class FileInfo(NamedTuple):
    """What is at a path: a regular file's mode and sha256, or (`found`) a symbolic link
    (`detail`: where it points, as text; never followed), a directory (`mode` its mode) or
    another kind (`detail`: its kind as `stat` names it); and whether an interrupted upload
    of sparkbase sits beside it."""

    mode: int
    sha256: str
    leftover: bool = False
    found: Found = Found.REGULAR
    detail: str = ""

    @property
    def regular(self) -> bool:
        """Whether a regular file is there (the only thing sparkbase writes over)."""
        return self.found is Found.REGULAR


class InitramfsCopy(NamedTuple):
    """What a kernel's initramfs holds of one file."""

    #: the image exists and was unpacked
    read: bool
    #: sha256 of the file as packed; None when the image does not hold it (or was not read)
    sha256: str | None = None
    #: why it was not read ("" when it was)
    problem: str = ""


@dataclass(frozen=True)
class NodeFacts:
    """Everything the audit compares, for one node, from one round trip."""

    node: str
    kernel_release: str | None = None
    machine: str | None = None
    page_size: int | None = None
    cmdline: tuple[str, ...] = ()
    fast_cpus: tuple[int, ...] = ()
    thp: str | None = None
    sysctls: dict[str, str | None] = field(default_factory=dict)
    gpu: GpuFacts = field(default_factory=GpuFacts)
    modules: frozenset[str] = frozenset()
    module_params: dict[str, str | None] = field(default_factory=dict)  # "module.param" -> value
    dkms: tuple[DkmsEntry, ...] = ()
    dkms_noise: tuple[str, ...] = ()  # `dkms status` lines that name no module (warnings)
    memory_saver: ModuleInfo | None = None
    #: `modinfo` of the fan-control module (`host.fan_control.module`), when the baseline has one
    fan_control: ModuleInfo | None = None
    secure_boot: SecureBoot | None = None
    mok_certificates: tuple[MokCertificate, ...] = ()
    #: imported with `mokutil --import`, not yet enrolled at the console (`--list-new`)
    mok_pending: tuple[MokCertificate, ...] = ()
    swaps: tuple[SwapEntry, ...] = ()
    swap_header_page_size: dict[str, int | None] = field(default_factory=dict)
    default_target: str | None = None
    #: `efibootmgr` (read when the baseline judges the boot order)
    efi_boot: EfiBoot | None = None
    #: DRM card -> the driver its device belongs to (when the baseline names one)
    drm_drivers: dict[str, str] = field(default_factory=dict)
    #: DRM card -> its clients (/sys/kernel/debug/dri/N/clients), None when unreadable
    drm_clients: dict[str, tuple[DrmClient, ...] | None] = field(default_factory=dict)
    #: the active virtual console and its KDGETMODE answer (when the baseline wants text mode)
    console: ConsoleMode | None = None
    #: the systemd manager's watchdog properties (`RuntimeWatchdogUSec`, `RebootWatchdogUSec`)
    watchdog: dict[str, str] = field(default_factory=dict)
    units: dict[str, UnitState] = field(default_factory=dict)
    slice_allowed_cpus: frozenset[int] | None = None  # the slice's `AllowedCPUs=`, as a set
    file_sha256: dict[str, str | None] = field(default_factory=dict)
    #: files sparkbase writes that are symbolic links -> where they point: never read through
    #: (their hash and text are left out, `facts/parsers/files.links_command`)
    links: dict[str, str] = field(default_factory=dict)
    nccl_library_sha256: str | None = None
    nccl_conf: str | None = None
    stamp: dict[str, object] | None = None
    interfaces: dict[str, Interface] = field(default_factory=dict)
    rdma_devices: tuple[str, ...] = ()
    gids: dict[str, Gid] = field(default_factory=dict)  # hca -> entry at the baseline's index
    #: every filled GID entry of every RDMA port (`FactPlan.gid_tables`; adopt reads the
    #: fabric from it: netdev, HCA, address and GID index of each path)
    gid_table: tuple[GidEntry, ...] = ()
    governors: dict[int, str] = field(default_factory=dict)
    #: NVMe feature 0x08 (interrupt coalescing) of /dev/nvme0; None when not read
    nvme_coalescing: int | None = None
    packages: dict[str, str] = field(default_factory=dict)  # installed name -> version
    grub: GrubBoot | None = None
    fstab: tuple[FstabEntry, ...] | None = None
    dgx_release: dict[str, str] | None = None  # /etc/dgx-release KEY -> value (last wins)
    #: "module.version" / "module.srcversion" -> value, for every loaded nvidia* module
    nvidia_modules: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # section -> what went wrong
    elapsed_seconds: float = 0.0
    #: the processes of the lanes looked for (`FactPlan.serving_matches`): those whose command
    #: line holds a lane's first match string, their cgroups' and their descendants
    #: (`facts.runtime.probe_command`); one lane's are picked by `facts.runtime.lane_group`
    serving: tuple[ServingProcess, ...] = ()
    #: Docker's view of the containers the serving processes run in and of the containers
    #: the lanes name (`FactPlan.serving_containers`), by container id
    containers: dict[str, Container] = field(default_factory=dict)
    #: a container asked about (by id or name; an image by its id) -> why docker could not
    #: show it ("docker not found", "no such container", ...)
    container_errors: dict[str, str] = field(default_factory=dict)
    round_trips: int = 1
    #: every netplan file with its exact text (`FactPlan.netplan_files`); None when not asked or
    #: not read (`errors` says why)
    netplan_files: NetplanListing | None = None
    # --- what plan and apply read besides (`FactPlan`'s deploy fields) ---
    #: path -> what is there (None: nothing), never following a link (`FactPlan.file_states`)
    file_states: dict[str, FileInfo | None] = field(default_factory=dict)
    #: path -> a regular file's text (None: no regular file, or unreadable without following a link)
    file_texts: dict[str, str | None] = field(default_factory=dict)
    #: (path, than) -> whether `path` was modified after `than` (False when either is missing)
    newer: dict[tuple[str, str], bool] = field(default_factory=dict)
    #: unit -> systemd's `NeedDaemonReload` (None: systemd did not say)
    need_reload: dict[str, bool | None] = field(default_factory=dict)
    #: (kernel, module) -> `modinfo -k KERNEL MODULE` (the module built for a target kernel)
    kernel_modinfo: dict[tuple[str, str], ModuleInfo] = field(default_factory=dict)
    #: (name, version) -> the DKMS source tree in /usr/src: {"present", "sha256", "registered"}
    dkms_sources: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    #: packages marked hold (`apt-mark showhold`)
    held: tuple[str, ...] = ()
    #: path -> a swap file's {"size", "mode", "header_page_size", "kind"} (None: nothing there)
    swap_files: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    #: path -> the UUID in a swap file's header (None: no file, or no UUID)
    swap_uuids: dict[str, str | None] = field(default_factory=dict)
    #: (release, path) -> what `release`'s initramfs holds of `path`
    initramfs: dict[tuple[str, str], InitramfsCopy] = field(default_factory=dict)
    #: directory -> everything in it, with each regular file's sha256 (None: no directory)
    dir_entries: dict[str, tuple[Entry, ...] | None] = field(default_factory=dict)
    #: what sparkbase recorded creating on the node (None: not read, or `ownership_problem`)
    ownership: OwnershipRecord | None = None
    #: why the ownership record cannot be used (a link there, a record of another format)
    ownership_problem: str | None = None
    #: what an earlier apply staged for the next boot (`FactPlan.staged_path`), in order
    staged: tuple[str, ...] = ()

    @property
    def mok_fingerprints(self) -> tuple[str, ...]:
        """SHA-1 fingerprints of the enrolled MOK certificates."""
        return tuple(cert.fingerprint for cert in self.mok_certificates)


@dataclass(frozen=True)
class Unreachable:
    """A node that could not be asked: refused, timed out, the wrong host key or login, or
    a fact script that did not answer; `kind` says which (`transport.failure`)."""

    node: str
    reason: str
    kind: FailureKind = FailureKind.UNREACHABLE


FactsResult = NodeFacts | Unreachable
