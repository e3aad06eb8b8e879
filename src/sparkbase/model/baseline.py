"""The typed host baseline: everything one DGX Spark host profile pins.

A baseline file in `baselines/NAME.yaml` validates into `Baseline`. Baselines may
`extends:` another; the merge happens on the raw data before validation (see `site.py`).
Rules that relate fields to each other live in `rules.py`, so that each can point at the
exact field to change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
)

from sparkbase.model.dgxos import TOOLS_PACKAGE_STEM
from sparkbase.model.paths import (
    DisableableUnit,
    LibraryPath,
    MokKeyPath,
    SiteNetplanFile,
    SliceUnit,
    SwapFilePath,
)
from sparkbase.model.provenance import Source, SourceKey
from sparkbase.model.sections import SECTIONS, Section, in_order, section_name
from sparkbase.model.types import (
    MAX_CPU_ID,
    CpuId,
    KernelArg,
    KernelRelease,
    Name,
    Netdev,
    PackageName,
    PackageVersion,
    PageSize,
    SemVer,
    Sha1Fingerprint,
    Sha256,
    StrictModel,
    ZeroOrOne,
)

ShapeName = Literal["ring4", "triangle3"]
#: nccl-ring: NCCL's ring; oneshot-ring4 / oneshot-direct: the variant's one-shot transports for
#: the four-node ring and the three-node triangle (spark-ds41f config/cluster-tp4.json,
#: config/cluster-64k.json)
Transport = Literal["nccl-ring", "oneshot-ring4", "oneshot-direct"]

#: how many nodes each shape spans
SHAPE_NODES: dict[str, int] = {"ring4": 4, "triangle3": 3}
#: the one-shot transports and the only shape each runs on
ONESHOT_SHAPES: dict[str, str] = {"oneshot-ring4": "ring4", "oneshot-direct": "triangle3"}

#: a `managed:` entry: a section name (an unknown one says which was meant)
ManagedSection = Annotated[Section, BeforeValidator(section_name)]

NcclKey = Annotated[str, StringConstraints(pattern=r"^NCCL_[A-Z0-9_]{1,60}$")]
#: NCCL keys a typed field renders, and that field: `extra` may not set them
TYPED_NCCL_KEYS: dict[str, str] = {
    "NCCL_IB_MERGE_NICS": "ib_merge_nics",
    "NCCL_IB_HCA": "ib_hca",
    "NCCL_SOCKET_IFNAME": "socket_ifname",
    "NCCL_IB_GID_INDEX": "ib_gid_index",
    "NCCL_MIN_NCHANNELS": "min_nchannels",
    "NCCL_MAX_NCHANNELS": "max_nchannels",
}


def _not_a_typed_nccl_key(key: str) -> str:
    """An `extra` key must not shadow a typed setting (the contract judges the typed one)."""
    if key in TYPED_NCCL_KEYS:
        raise ValueError(
            f"{key} is a typed setting: set nccl.settings.{TYPED_NCCL_KEYS[key]}, not extra "
            "(an extra key would override it in /etc/nccl.conf)"
        )
    return key


NcclExtraKey = Annotated[NcclKey, AfterValidator(_not_a_typed_nccl_key)]
NcclValue = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.,:=^/+-]{0,200}$")]
SysctlKey = Annotated[str, StringConstraints(pattern=r"^(vm|kernel|net|fs)(\.[a-z0-9_]+){1,4}$")]
SysctlValue = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_. -]{1,64}$")]


_CPU_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")


def _cpu_list(value: object) -> object:
    """Accept `[5, 6, 7]` or the kernel's cpulist text `5-9,15-19`.

    Each range is checked against MAX_CPU_ID before it is expanded, so `5-99999999999999`
    is an error, never a list built in memory.
    """
    if not isinstance(value, str):
        return value
    cpus: list[int] = []
    for chunk in value.split(","):
        chunk = chunk.strip()
        if not chunk:
            continue
        match = _CPU_RANGE.fullmatch(chunk)
        if match is None:
            raise ValueError(f"not a CPU list: {chunk[:40]!r} (write e.g. 5-9,15-19)")
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        if max(len(low_text), len(high_text)) > 9:  # no int() of a thousand digits
            raise ValueError(f"CPU {chunk[:40]} is out of range (CPU ids go up to {MAX_CPU_ID})")
        low, high = int(low_text), int(high_text)
        if high > MAX_CPU_ID:
            raise ValueError(f"CPU {high} is out of range (CPU ids go up to {MAX_CPU_ID})")
        if low > high:
            raise ValueError(f"range {chunk} runs backwards (write {high}-{low})")
        cpus.extend(range(low, high + 1))
    return cpus


def _text_value(value: object) -> object:
    """YAML gives ints and bools for values like 0 or yes; sysctl/NCCL files want text."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return value


class PackagePin(StrictModel):
    """A Debian package held at one exact version."""

    name: PackageName = Field(description="Debian package name")
    version: PackageVersion = Field(description="exact Debian version to install and hold")


class OsSpec(StrictModel):
    """The operating system image the baseline was qualified on."""

    release: str = Field(
        description="DGX OS release, as /etc/dgx-release names it (informational, audited as a warning)",
        max_length=64,
        pattern=r"^[A-Za-z0-9 ._-]+$",
    )


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


class DriverSpec(StrictModel):
    """The NVIDIA driver: one version for the user space and the kernel module.

    Debian versions as DGX OS 24.04 ships them (spark-ds41f
    experiments/2026-10-02-driver-cuda-refresh/runs/packages.json): the user-space packages
    are `<driver>-0ubuntu0.24.04.N` (N is not derivable: confirm or capture it), the kernel
    module package for a kernel is that kernel's package version plus `+1`.
    """

    version: PackageVersion = Field(description="driver version, as `nvidia-smi` reports it")
    package_version: PackageVersion = Field(
        description="Debian version of nvidia-utils-<major> (`<driver>-0ubuntu0.24.04.N`)"
    )
    branch: Literal["580-open"] = Field(default="580-open", description="driver branch")

    def packages(self, kernel: KernelSpec) -> list[PackagePin]:
        """User-space utilities and the kernel module package built for `kernel`."""
        return [self.utilities(), self.kernel_module(kernel)]

    def utilities(self) -> PackagePin:
        """The driver's user space: nvidia-utils-<major> (nvidia-smi)."""
        return PackagePin(name=f"nvidia-utils-{self.branch.split('-')[0]}", version=self.package_version)

    def kernel_source(self) -> PackagePin:
        """NVIDIA's kernel source (`nvidia-kernel-source-<branch>`, /usr/src/nvidia-<driver>) at
        the driver's Debian version: what a DKMS build against the driver reads (the memory
        saver's supported combination: source package 580.178.04-0ubuntu0.24.04.1)."""
        return PackagePin(name=f"nvidia-kernel-source-{self.branch}", version=self.package_version)

    def kernel_module(self, kernel: KernelSpec) -> PackagePin:
        """The NVIDIA kernel module package built for `kernel` (its package version plus `+1`)."""
        return PackagePin(
            name=f"linux-modules-nvidia-{self.branch}-{kernel.release}",
            version=f"{kernel.package_version}+1",
        )


class NcclLibrary(StrictModel):
    """The one NCCL library every lane loads, and where it comes from (`provided_by`).

    `package` (the default): a Debian package sparkbase installs and holds at `version`; it
    ships the file at `path`, identified by `sha256`. `site`: a plain file the site puts at
    `path` itself (the site's patched build, bind-mounted into its containers); sparkbase
    never installs, holds or removes anything for it, and the audit and the launch gate
    still judge that the file at `path` has `sha256` and that serving processes map it.
    `image`: NCCL is built into the lane's container image (the variant's recipe builds NCCL
    2.30.7 into its image): nothing on the host, so no `package`, `path` or `sha256`; the
    lane's runtime check reads the version the serving process maps (from the library's
    file name) and judges it against `version` when it can tell.

    A `site` library refuses `package` and `version` rather than keeping them as
    information: every value in a baseline is one sparkbase enforces or judges, and a
    package name and version beside a file nobody installs would read as a pin that
    `plan`, `audit` and `compare` never act on. Where the file comes from belongs in the
    baseline's `sources:` (`nccl.library: {kind: site, note: ...}`).
    """

    provided_by: Literal["package", "site", "image"] = Field(
        default="package",
        description="package: a Debian package sparkbase installs and holds (needs package, version, path, "
        "sha256); site: a file the site puts at path itself (checked, never installed: path and sha256); "
        "image: built into the lane's container image (nothing on the host; version judged at runtime)",
    )
    package: PackageName | None = Field(
        default=None, description="Debian package that ships the library (provided_by: package only)"
    )
    version: PackageVersion | None = Field(
        default=None,
        description="exact package version (provided_by: package), or the NCCL version the image's library "
        "reports in its file name, libnccl.so.VERSION (provided_by: image, optional)",
    )
    path: LibraryPath | None = Field(
        default=None, description="path of the shared object on the node (provided_by: package or site)"
    )
    sha256: Sha256 | None = Field(
        default=None, description="sha256 of the shared object file (provided_by: package or site)"
    )

    @field_validator("package", "version", "path", "sha256")
    @classmethod
    def _fields_of_its_kind(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Each kind takes exactly its own fields: a value nobody acts on is refused."""
        provided_by = info.data.get("provided_by")  # absent when provided_by itself is wrong
        field = info.field_name
        if provided_by == "package" and value is None:
            raise ValueError("required: the library is provided_by: package, so sparkbase installs "
                             "that package at an exact version (or say provided_by: site or image)")
        if provided_by == "site" and value is None and field in {"path", "sha256"}:
            raise ValueError("required: the library is provided_by: site, judged by its path and sha256")
        if provided_by == "site" and value is not None and field in {"package", "version"}:
            raise ValueError(f"a library provided_by: site is a file the site puts there: sparkbase installs "
                             f"no package for it, so it takes no {field} (remove it, or say "
                             "provided_by: package)")
        if provided_by == "image" and value is not None and field != "version":
            raise ValueError(f"a library provided_by: image is built into the lane's container image: "
                             f"nothing is installed or judged on the host, so it takes no {field} "
                             "(remove it, or say provided_by: package or site)")
        return value

    def on_host(self) -> bool:
        """Whether the library is a host file (package or site) the host audit judges."""
        return self.provided_by != "image"

    def pin(self) -> PackagePin | None:
        """The package sparkbase installs for the library (None for a site file or an image's)."""
        if self.provided_by != "package" or self.package is None or self.version is None:
            return None
        return PackagePin(name=self.package, version=self.version)


class NcclSettings(StrictModel):
    """Settings written to /etc/nccl.conf (KEY=value lines NCCL reads at init)."""

    ib_merge_nics: ZeroOrOne = Field(
        description="NCCL_IB_MERGE_NICS; NCCL defaults to 1, so the site's 0 must be explicit"
    )
    ib_hca: list[Name] = Field(
        min_length=1, description="NCCL_IB_HCA: the RDMA devices NCCL may use (name or name:port)"
    )
    socket_ifname: Name = Field(description="NCCL_SOCKET_IFNAME: interface for bootstrap")
    ib_gid_index: int = Field(ge=0, le=255, description="NCCL_IB_GID_INDEX: RoCE v2 IPv4 GID")
    min_nchannels: int | None = Field(default=None, ge=1, le=64, description="NCCL_MIN_NCHANNELS")
    max_nchannels: int | None = Field(default=None, ge=1, le=64, description="NCCL_MAX_NCHANNELS")
    extra: dict[NcclExtraKey, Annotated[NcclValue, BeforeValidator(_text_value)]] = Field(
        default_factory=dict,
        description="further NCCL_* settings, written as given (never a key a typed field sets)",
    )

    def as_env(self) -> dict[str, str]:
        """Every setting as NCCL's KEY -> value text, typed fields first, then extras.

        This is exactly what /etc/nccl.conf holds, so rules that judge NCCL read it here.
        """
        env = {
            "NCCL_IB_MERGE_NICS": str(self.ib_merge_nics),
            "NCCL_IB_HCA": ",".join(self.ib_hca),
            "NCCL_SOCKET_IFNAME": self.socket_ifname,
            "NCCL_IB_GID_INDEX": str(self.ib_gid_index),
        }
        if self.min_nchannels is not None:
            env["NCCL_MIN_NCHANNELS"] = str(self.min_nchannels)
        if self.max_nchannels is not None:
            env["NCCL_MAX_NCHANNELS"] = str(self.max_nchannels)
        for key in sorted(self.extra):
            env[key] = self.extra[key]
        return env


class ShapeNcclSettings(StrictModel):
    """The NCCL settings one serving shape adds to, or changes in, `nccl.settings` (the
    variant's ring4 and triangle3 run different NCCL policies on the same hosts: spark-ds41f
    config/cluster-tp4.json and config/cluster-4k.json). Unset fields keep the shared value;
    `extra` keys are added, or replace a shared extra of the same name."""

    ib_merge_nics: ZeroOrOne | None = Field(default=None, description="NCCL_IB_MERGE_NICS on this shape")
    ib_hca: list[Name] | None = Field(
        default=None, min_length=1, description="NCCL_IB_HCA on this shape (the devices, in NCCL's order)"
    )
    min_nchannels: int | None = Field(default=None, ge=1, le=64,
                                      description="NCCL_MIN_NCHANNELS on this shape")
    max_nchannels: int | None = Field(default=None, ge=1, le=64,
                                      description="NCCL_MAX_NCHANNELS on this shape")
    extra: dict[NcclExtraKey, Annotated[NcclValue, BeforeValidator(_text_value)]] = Field(
        default_factory=dict,
        description="further NCCL_* settings of this shape, written as given (never a key a typed field "
        "sets)",
    )


class NcclSpec(StrictModel):
    """NCCL: the shared library, the settings every shape shares and each shape's own."""

    library: NcclLibrary = Field(description="the NCCL shared library every lane loads")
    settings: NcclSettings = Field(
        description="settings written to /etc/nccl.conf on every node, whatever its shape"
    )
    shapes: dict[ShapeName, ShapeNcclSettings | None] = Field(
        default_factory=dict,
        description="per serving shape (ring4, triangle3): the settings a node of that shape adds to or "
        "changes in `settings` (its /etc/nccl.conf, and what its lanes' processes must load); null: none "
        "(a baseline that extends one with a shape it is not qualified for drops them so)",
    )

    def settings_for(self, shape: str | None) -> NcclSettings:
        """The effective settings of a node or lane of `shape` (None: the shared ones)."""
        own = next((settings for name, settings in self.shapes.items() if name == shape), None)
        if own is None:
            return self.settings
        changed = own.model_dump(exclude={"extra"}, exclude_none=True)
        return self.settings.model_copy(update={**changed, "extra": {**self.settings.extra, **own.extra}})

    def env_for(self, shape: str | None) -> dict[str, str]:
        """NCCL's KEY -> value text on `shape` (`NcclSettings.as_env` of `settings_for`)."""
        return self.settings_for(shape).as_env()

    def shaped(self) -> dict[str, ShapeNcclSettings]:
        """The shapes that carry settings of their own."""
        return {name: own for name, own in self.shapes.items() if own is not None}


class FabricPort(StrictModel):
    """One PCIe view of a ConnectX-7 port: a netdev and its RDMA device."""

    netdev: Netdev = Field(description="network device name, e.g. enp1s0f0np0")
    hca: Name = Field(description="RDMA device name, e.g. rocep1s0f0")
    port: ZeroOrOne = Field(description="physical 200 GbE port (cable) this view belongs to")


class FabricSpec(StrictModel):
    """The ring fabric: ConnectX-7 views, MTU and the RoCE GID NCCL must use."""

    mtu: int = Field(ge=1280, le=9216, description="MTU of every fabric netdev")
    ports: list[FabricPort] = Field(
        min_length=1, description="every PCIe view of the ConnectX-7 ports (four on a Spark)"
    )
    gid_index: int = Field(ge=0, le=255, description="GID index that must hold the IPv4 RoCE v2 address")
    netplan_file: SiteNetplanFile | None = Field(
        default=None,
        description="the site's own netplan file that configures the fabric ports: sparkbase manages the "
        "fabric's interfaces in it (the first apply records its content, which moving the node to a "
        "baseline without it puts back) and writes no file of its own; unset: sparkbase writes "
        "/etc/netplan/60-sparkbase-fabric.yaml and refuses while another netplan file configures a "
        "fabric port",
    )

    def netdevs(self) -> list[str]:
        """Netdev names of every port view."""
        return [port.netdev for port in self.ports]

    def hca_names(self) -> list[str]:
        """RDMA device names of every port view."""
        return [port.hca for port in self.ports]


class Shape(StrictModel):
    """A serving shape the baseline is qualified for, and the transport it uses."""

    name: ShapeName = Field(description="ring4 (four nodes) or triangle3 (three nodes)")
    transport: Transport = Field(description="collective transport serving uses on this shape")


class SwapSpec(StrictModel):
    """A swap file."""

    path: SwapFilePath = Field(description="swap file path (not under a system tree)")
    size_gib: int = Field(ge=1, le=512, description="size in GiB")
    header_page_size: PageSize = Field(description="page size written in the swap header")


#: where the DGX OS installer (Ubuntu's curtin) puts its swap file, with a 4 KiB header
FACTORY_SWAP_PATH = "/swap.img"
#: the page size the installer writes the swap header for (DGX OS installs a 4 KiB kernel)
FACTORY_SWAP_HEADER = 4096


class FactorySwapSpec(StrictModel):
    """The installer's swap file, which sparkbase never creates, resizes or deletes.

    `fstab: noauto` is the recipe's (spark-ds41f install-boot-support.sh): its /etc/fstab
    line keeps the file but no longer activates it at boot. sparkbase records the line as it
    found it and puts it back when the node moves to a baseline that does not ask for
    `noauto`, if nobody changed the line since. `fstab: as-installed` leaves the line alone
    and judges that the file is the node's active swap (the recipe's 4 KiB profile swaps on
    it: host/kernel-memory/spark3-kernel-memory).
    """

    path: SwapFilePath = Field(default=FACTORY_SWAP_PATH, description="the installer's swap file")
    fstab: Literal["as-installed", "noauto"] = Field(
        description="as-installed: its fstab line activates it at boot (the node's swap); "
        "noauto: sparkbase marks its fstab line noauto (recorded, undone on move-back)"
    )
    swapoff: bool = Field(
        default=False,
        description="with noauto, also switch it off now when it is active (the recipe never swaps "
        "off a live file: it stops at the next boot)",
    )


#: a module's `srcversion` as kmod and /sys/module print it (modpost's hex digest)
SrcVersion = Annotated[str, StringConstraints(pattern=r"^[0-9A-F]{16,32}$")]


#: a git commit, full length (a short id can become ambiguous)
GitRevision = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")]
#: an https URL of a public git repository (no credentials, query or fragment)
RepositoryUrl = Annotated[str, StringConstraints(
    pattern=r"^https://[A-Za-z0-9.-]{1,100}(/[A-Za-z0-9._~+-]{1,100}){1,6}$", max_length=300)]


class DkmsSource(StrictModel):
    """The source a DKMS module is built from: a repository at a pinned revision, placed on
    the node as a tarball of that checkout whose sha256 is pinned (`git archive` of the
    revision, one top directory). apply fetches it (from the site's source mirror, else the
    repository host's archive of the revision), checks the sha256, unpacks it into
    /usr/src/NAME-VERSION and registers it with `dkms add`, as the recipe registers its
    checkout (spark-ds41f experiments/2026-10-02-memory-saver-capacity/install-dkms.sh)."""

    repository: RepositoryUrl = Field(description="the git repository the module comes from")
    revision: GitRevision = Field(description="the commit DKMS builds (40 hex digits)")
    sha256: Sha256 = Field(description="sha256 of the tarball of that checkout (what apply verifies)")

    def tarball(self, dkms_name: str) -> str:
        """The tarball's file name in a source mirror: NAME-REVISION.tar.gz."""
        return f"{dkms_name}-{self.revision}.tar.gz"

    def archive_url(self) -> str:
        """Where the repository host serves the revision as a tarball (GitHub's archive)."""
        return f"{self.repository.removesuffix('.git')}/archive/{self.revision}.tar.gz"


class MemorySaverSpec(StrictModel):
    """The memory saver (spark-ds41f): a patched `nvidia-uvm` that DKMS builds and installs
    under `updates/dkms`, where it replaces the stock module at load. It is no module of its
    own: the loaded `nvidia_uvm` is told apart from the stock one by its `srcversion`, and
    its build turns packing on by default (no modprobe option: the stock module refuses it)."""

    required: bool = Field(description="the module must be built, signed and loaded")
    source: DkmsSource = Field(description="the checkout DKMS builds it from (repository, revision, sha256)")
    dkms_name: Name = Field(description="DKMS module name (dkms status)")
    dkms_version: Name = Field(description="DKMS module version")
    module: Name = Field(description="kernel module name as loaded (/proc/modules)")
    srcversion: SrcVersion | None = Field(
        default=None, description="srcversion of the loaded patched module (None: not judged)"
    )
    packing_parameter: Name = Field(description="module parameter that shows packing (built-in default)")
    packing: bool = Field(description="packing on (Y) or off (N)")


class MemorySpec(StrictModel):
    """Memory policy: swap, THP, sysctls, memory-saver, display carve-out."""

    swap: SwapSpec | None = Field(default=None, description="swap file, or none")
    factory_swap: FactorySwapSpec | None = Field(
        default=None, description="what becomes of the installer's /swap.img, or none (left as found)"
    )
    transparent_hugepages: Literal["always", "madvise", "never"] = Field(
        description="/sys/kernel/mm/transparent_hugepage/enabled"
    )
    sysctls: dict[SysctlKey, Annotated[SysctlValue, BeforeValidator(_text_value)]] = Field(
        default_factory=dict, description="kernel settings written to sysctl.d and applied live"
    )
    memory_saver: MemorySaverSpec | None = Field(
        default=None, description="the memory-saver DKMS module, or none"
    )
    display_carveout: bool = Field(
        default=False, description="GB10 display carve-out returned to serving (needs nvidia-drm modeset)"
    )
    swap_by_page_size: bool = Field(
        default=False,
        description="a boot unit sparkbase renders (sparkbase-swap.service) swaps on the file whose "
        "header is the running kernel's page size: the swap file on its page size, the installer's "
        "(noauto) on 4 KiB; the swap file then has no /etc/fstab line, so every kernel boots with swap",
    )

    def swap_files(self) -> dict[int, str]:
        """Page size -> the swap file a kernel of that page size swaps on at boot under
        `swap_by_page_size`: the baseline's swap file on its header's page size, the
        installer's on 4 KiB (its header's) when the baseline keeps it noauto."""
        files: dict[int, str] = {}
        factory = self.factory_swap
        if factory is not None and factory.fstab == "noauto":
            files[FACTORY_SWAP_HEADER] = factory.path
        if self.swap is not None:
            files[self.swap.header_page_size] = self.swap.path
        return dict(sorted(files.items()))


class SecureBootSpec(StrictModel):
    """Secure Boot and the machine owner key used to sign DKMS modules."""

    enabled: bool = Field(description="Secure Boot must be on (true) or off (false)")
    mok_fingerprint: Sha1Fingerprint | None = Field(
        default=None, description="SHA-1 fingerprint of the enrolled MOK certificate (never the key)"
    )
    mok_certificate: MokKeyPath = Field(
        default="/var/lib/shim-signed/mok/MOK.der",
        description="where the MOK certificate lives on the node (DKMS signs with it)",
    )
    mok_private_key: MokKeyPath = Field(
        default="/var/lib/shim-signed/mok/MOK.priv",
        description="where the MOK private key lives on the node; secret, never read or printed",
    )


#: the only packages `host.nvidia_drm.purge` may name: DGX OS's nvidia-drm options package
#: that forces a modeset value (`nvidia-drm-options-modeset0` turns it off; spark-ds41f
#: docs/setup.md "Kernel mode setting"), never a free package name
ModesetOptionsPackage = Annotated[str, StringConstraints(pattern=r"^nvidia-drm-options-modeset[0-9]$")]


class NvidiaDrmSpec(StrictModel):
    """nvidia-drm module parameters (modprobe.d), and the DGX OS options package that
    overrides them from the initramfs."""

    modeset: bool = Field(description="nvidia-drm modeset=1")
    fbdev: bool = Field(description="nvidia-drm fbdev=1")
    purge: ModesetOptionsPackage | None = Field(
        default=None,
        description="DGX OS's nvidia-drm-options-modeset<N> package to purge (then the initramfs "
        "is rebuilt for every kernel and the node reboots); the version removed is recorded and "
        "reinstalled when the node moves back to a baseline that keeps it",
    )


class NvmeSpec(StrictModel):
    """NVMe power and interrupt settings."""

    apst: Literal["default", "disabled"] = Field(
        description="Autonomous Power State Transition: 'disabled' pins the drive awake"
    )
    interrupt_coalescing: bool = Field(
        default=True,
        description="NVMe interrupt coalescing: true = DGX OS's default (its "
        "nvidia-nvme-interrupt-coalescing.service sets feature 0x08 to 0x107 at boot); false = that "
        "unit masked (recorded, undone on move-back) and the feature set to 0",
    )


class FanControlSpec(StrictModel):
    """Fan control (spark-ds41f, christopherowen/dgx-spark-fan-control): a DKMS module
    (`dgx_ec_fan_control`) that DKMS builds and signs with the fleet MOK key, loaded at boot
    by a modules-load.d entry, and the daemon that sets the fan floor."""

    package: PackageName = Field(
        description="package that installs the DKMS source tree, the daemon and its unit"
    )
    package_version: PackageVersion = Field(description="exact version of that package")
    dkms_name: Name = Field(description="DKMS module name (dkms status)")
    dkms_version: Name = Field(description="DKMS module version")
    module: Name = Field(
        description="kernel module name as loaded (/proc/modules), listed in /etc/modules-load.d/MODULE.conf"
    )
    service: DisableableUnit = Field(
        description="unit that must be enabled and active (disabled on other baselines' nodes)"
    )

    @property
    def modules_load_path(self) -> str:
        """The modules-load.d entry that loads the module at boot (dgx-spark-fan-control
        docs/installation.md: /etc/modules-load.d/dgx_ec_fan_control.conf)."""
        return f"/etc/modules-load.d/{self.module}.conf"


#: a UEFI boot entry's label, as `efibootmgr` prints it (matched case-insensitively)
BootLabel = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._()-]{0,63}$")]
#: a kernel driver name (the basename of `/sys/class/drm/cardN/device/driver`)
DriverName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")]
#: a systemd time span as `systemctl show` prints it (`30s`, `10min`, `0`, `infinity`)
TimeSpan = Annotated[str, StringConstraints(
    pattern=r"^(0|infinity|([0-9]+(us|ms|s|min|h|d)( [0-9]+(us|ms|s|min|h|d))*))$")]


class WatchdogSpec(StrictModel):
    """systemd's hardware watchdog (system.conf `RuntimeWatchdogSec`, `RebootWatchdogSec`), as
    `systemctl show` reads them back (`RuntimeWatchdogUSec`, `RebootWatchdogUSec`)."""

    runtime: TimeSpan = Field(description="RuntimeWatchdogUSec: PID 1 pings the watchdog within this")
    reboot: TimeSpan = Field(description="RebootWatchdogUSec: a reboot that hangs longer is forced")


class HostSpec(StrictModel):
    """Host-level settings: boot target, display, NVMe, fans, services, extra packages."""

    boot_target: Literal["multi-user.target", "graphical.target"] = Field(
        description="systemd default target"
    )
    display_manager: bool = Field(description="a display manager may run (false: headless)")
    nvidia_drm: NvidiaDrmSpec = Field(description="nvidia-drm module parameters")
    nvme: NvmeSpec = Field(description="NVMe power settings")
    cpu_governor: Literal["performance"] | None = Field(
        default=None,
        description="scaling_governor of every CPU, set at boot by DGX OS's nv-cpu-governor.service "
        "(which sets performance only; needs kernel.tools); null: not managed or judged",
    )
    fan_control: FanControlSpec | None = Field(default=None, description="fan control, or none")
    disable_services: list[DisableableUnit] = Field(
        default_factory=list, description="units that must be disabled and stopped"
    )
    packages: list[PackagePin] = Field(
        default_factory=list, description="further packages held at exact versions"
    )
    uefi_first: BootLabel | None = Field(
        default=None,
        description="label of the UEFI boot entry that must come first in BootOrder (the installed "
        "OS, e.g. 'ubuntu'); null: not judged",
    )
    drm_driver: DriverName | None = Field(
        default=None, description="driver a DRM card must belong to (e.g. 'nvidia'); null: not judged"
    )
    console_text: bool = Field(
        default=False,
        description="the active virtual console must be in text mode (KDGETMODE = KD_TEXT); "
        "false: not judged",
    )
    watchdog: WatchdogSpec | None = Field(
        default=None, description="systemd's watchdog settings as PID 1 runs them; null: not judged"
    )


class CpusetSpec(StrictModel):
    """The CPUs serving may use, and what holds the lanes to them: the systemd slice
    sparkbase writes (`pinned_by: slice`), or each lane container's own `--cpuset-cpus`
    (`pinned_by: container`: the site's containers sit in Docker's scopes, no slice is
    written or required, and each lane process's CPUs are judged at run time)."""

    slice: SliceUnit = Field(default="sparkbase-serving.slice", description="slice unit name")
    pinned_by: Literal["slice", "container"] = Field(
        default="slice",
        description="what holds serving to the CPUs: the slice sparkbase writes, or each lane "
        "container's --cpuset-cpus (no slice written or checked)",
    )
    cpus: Annotated[list[CpuId], BeforeValidator(_cpu_list)] = Field(
        min_length=1,
        max_length=MAX_CPU_ID + 1,
        description="AllowedCPUs of the slice (list or cpulist text like 5-9,15-19)",
    )

    def cpulist(self) -> str:
        """The CPUs as the kernel's compact cpulist text (`5-9,15-19`)."""
        cpus = sorted(set(self.cpus))
        ranges: list[str] = []
        start = prev = cpus[0]
        for cpu in [*cpus[1:], None]:
            if cpu is not None and cpu == prev + 1:
                prev = cpu
                continue
            ranges.append(f"{start}-{prev}" if prev != start else str(start))
            if cpu is not None:
                start = prev = cpu
        return ",".join(ranges)


class Baseline(StrictModel):
    """One host profile. Its name is its file name (`baselines/NAME.yaml`).

    Its host sections (kernel, driver, nccl, fabric, memory, secure_boot, host, cpuset) say
    what a node must be; `managed` says which of them sparkbase writes (the others are as
    found: judged, never written; `sparkbase.model.sections`).
    """

    version: SemVer = Field(description="version of this baseline; bump on any change it renders")
    description: str = Field(default="", max_length=500, description="what this profile is for")
    extends: Name | None = Field(default=None, description="baseline this one starts from")
    abstract: bool = Field(
        default=False, description="a partial profile other baselines extend; never assigned"
    )
    os: OsSpec = Field(description="operating system image")
    kernel: KernelSpec = Field(description="kernel, page size and command line")
    driver: DriverSpec = Field(description="NVIDIA driver")
    nccl: NcclSpec = Field(description="NCCL library and settings")
    fabric: FabricSpec = Field(description="ConnectX-7 ring fabric")
    memory: MemorySpec = Field(description="memory policy")
    secure_boot: SecureBootSpec = Field(description="Secure Boot and MOK")
    host: HostSpec = Field(description="host settings")
    cpuset: CpusetSpec = Field(description="serving cpuset")
    shapes: list[Shape] = Field(min_length=1, description="shapes this baseline is qualified for")
    managed: Annotated[list[ManagedSection], AfterValidator(in_order)] = Field(
        default_factory=lambda: list(SECTIONS),
        description="the sections sparkbase writes on the node (default: all); a section not listed is "
        "as found: never written, installed, removed or restarted, its effective values still "
        "audited (see sparkbase.model.sections)",
        json_schema_extra={"uniqueItems": True},
    )
    sources: dict[SourceKey, Source] = Field(
        default_factory=dict,
        max_length=500,
        exclude=True,  # where a value comes from is not what is rendered or pinned
        description="where each value comes from: dotted field path -> source (see provenance.py)",
    )

    def shape(self, name: str) -> Shape | None:
        """The qualified shape called `name`, if any."""
        return next((shape for shape in self.shapes if shape.name == name), None)

    def manages(self, section: Section) -> bool:
        """Whether sparkbase writes `section` on the node (else it is as found)."""
        return section in self.managed

    def unmanaged(self) -> list[Section]:
        """The sections left as found, in the baseline's order."""
        return [section for section in SECTIONS if section not in self.managed]

    def pins_by_section(self) -> dict[Section, list[PackagePin]]:
        """Every package the baseline pins, by the section it belongs to, in install order.

        A package built for one kernel (its image, headers, modules, tools and the NVIDIA
        module package built for it) is the kernel section's: it is installed and retired
        with that kernel, never apart from it (a kernel without its NVIDIA module boots with
        no GPU). The driver section is the driver's user space.
        """
        fallback = self.kernel.fallback
        kernel = [*self.kernel.packages(), self.driver.kernel_module(self.kernel)]
        if fallback is not None:
            kernel.extend(fallback.packages(self.driver.branch))
            if self.kernel.tools:  # the governor unit runs cpupower on the fallback kernel too
                kernel.append(PackagePin(name=f"{TOOLS_PACKAGE_STEM}-{fallback.release}",
                                         version=fallback.package_version))
        library = self.nccl.library.pin()
        saver = self.memory.memory_saver
        fan = self.host.fan_control
        pins: dict[Section, list[PackagePin]] = {
            "kernel": kernel,
            "driver": [self.driver.utilities()],
            "nccl": [library] if library is not None else [],
            # the saver's build reads NVIDIA's packaged kernel source at the driver's exact version
            "memory": ([self.driver.kernel_source()] if saver is not None and saver.required else []),
            "host": [*([PackagePin(name=fan.package, version=fan.package_version)] if fan else []),
                     *self.host.packages],
        }
        return {section: pins[section] for section in SECTIONS if pins.get(section)}

    def packages(self) -> list[PackagePin]:
        """Every package the baseline pins, section by section in install order
        (`host.packages` last)."""
        return [pin for pins in self.pins_by_section().values() for pin in pins]

    def dkms_builds(self) -> list[DkmsBuild]:
        """Every module DKMS must build, sign (under Secure Boot) and install for the kernel:
        the memory saver when required, and fan control."""
        builds = []
        saver = self.memory.memory_saver
        if saver is not None and saver.required:
            builds.append(DkmsBuild("memory saver", saver.dkms_name, saver.dkms_version, saver.module,
                                    "memory", saver.source))
        fan = self.host.fan_control
        if fan is not None:
            builds.append(DkmsBuild("fan control", fan.dkms_name, fan.dkms_version, fan.module, "host"))
        return builds


@dataclass(frozen=True)
class DkmsBuild:
    """One module DKMS builds for the baseline's kernel: what it is for, its DKMS name and
    version, and the kernel module it installs."""

    purpose: str
    dkms_name: str
    dkms_version: str
    module: str
    #: the section whose steps build it (`memory` for the memory saver, `host` for fan control)
    section: Section
    #: the checkout apply places and registers (None: a package installs the source tree)
    source: DkmsSource | None = None
