"""From a node's baseline to the ordered list of things the deploy must ensure.

A `Step` is plain data: its kind's typed arguments (`sparkbase.deploy.kinds`: the kind
adds the operation that ensures it), a name a person reads in a plan and the baseline
section it belongs to. Building steps needs no host and loads no pyinfra, so the whole
deploy order is tested as data (`tests/unit/deploy_cases/`). Every setting comes from the
typed baseline and the renderer: nothing here repeats a value.

Every step belongs to exactly one section of the baseline (`Step.section`, see
`sparkbase.model.sections`), the stamp alone to none (sparkbase's own record, written when
the baseline manages anything). The steps of a section the baseline leaves as found are
not built, its retire steps included: sparkbase never writes, installs, removes or
restarts anything there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbase.deploy import kinds
from sparkbase.model.host import GOVERNOR_UNIT, NVME_COALESCING_UNIT
from sparkbase.model.memory import BOOT_SWAP_SCRIPT, BOOT_SWAP_UNIT, BOOT_SWAP_UNIT_FILE
from sparkbase.model.sections import SECTIONS
from sparkbase.policy.foreign import Foreign, foreign_for, foreign_fstab_edits, foreign_swap_files
from sparkbase.render import (
    FSTAB_PATH,
    GRUB_DROPIN_PATH,
    MODPROBE_PATH,
    STAMP_PATH,
    SYSCTL_PATH,
    RenderedFile,
    fabric_ethernets,
    fabric_netplan_path,
    kernel_cmdline,
    managed_lines,
    node_paths,
    render_node,
    swap_fstab_line,
    sysctls,
)

if TYPE_CHECKING:
    from sparkbase.model.baseline import Baseline, DkmsBuild
    from sparkbase.model.sections import Section
    from sparkbase.model.site import Site
    from sparkbase.model.types import PackagePin

#: the display manager alias every desktop image enables (gdm3, lightdm, ...)
DISPLAY_MANAGER_UNIT = "display-manager.service"


class DeployConfigError(ValueError):
    """The deploy cannot be built from what the operator gave (a usage/config problem)."""


@dataclass(frozen=True)
class MokFiles:
    """The operator's MOK key pair on the local machine (the private key is a secret)."""

    certificate: Path
    private_key: Path

    @classmethod
    def from_dir(cls, directory: Path) -> MokFiles:
        """`MOK.der` and `MOK.priv` in `directory`."""
        return cls(directory / "MOK.der", directory / "MOK.priv")

    def fingerprint(self) -> str:
        """SHA-1 fingerprint of the certificate, as `mokutil` prints it (aa:bb:...)."""
        digest = hashlib.sha1(self.certificate.read_bytes()).hexdigest()  # noqa: S324 - MOK ids are SHA-1
        return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


@dataclass(frozen=True)
class Step:
    """One thing the deploy ensures on a node, in order."""

    #: the kind's arguments (their class is the kind)
    args: kinds.StepArgs
    name: str
    #: a change made by this step only takes effect after a reboot
    reboot: bool = False
    #: the step handles a secret: never diff, print or log its content
    secret: bool = False
    #: path of the file step whose change triggers this step
    after_change_of: str | None = None
    #: the baseline section the step belongs to (None: the stamp, sparkbase's own record)
    section: Section | None = field(kw_only=True)

    @property
    def kind(self) -> str:
        """The kind's name (`kinds.KINDS`), as plans and results show it."""
        return self.args.kind

    def summary(self) -> dict[str, Any]:
        """The step as JSON-able data with file contents replaced by their sha256."""
        args: dict[str, Any] = {}
        for key, value in sorted(self.args.as_dict().items()):
            if key == "content":
                args["sha256"] = hashlib.sha256(str(value).encode()).hexdigest()
            else:
                args[key] = value
        out: dict[str, Any] = {"kind": self.kind, "name": self.name, "section": self.section, "args": args}
        if self.reboot:
            out["reboot"] = True
        if self.secret:
            out["secret"] = True
        if self.after_change_of:
            out["after_change_of"] = self.after_change_of
        return out


def build_steps(site: Site, node: str, mok: MokFiles | None = None, mirror: str | None = None) -> list[Step]:
    """Every step that converges `node` to its baseline, in the order they must run: only
    those of the sections the baseline manages (the stamp when it manages any). DKMS source
    tarballs are fetched from `mirror` (a URL prefix), else from the repository host."""
    name = site.inventory.nodes[node].baseline
    baseline = site.baselines[name]
    files = render_node(site, node)  # only the managed sections' files, the stamp last
    foreign = foreign_for(site, name)  # only in sections this baseline manages
    fabric = fabric_ethernets(baseline, node_paths(site, node))
    steps = [
        *_package_steps(baseline),
        *retire_steps(foreign, baseline),
        *_secure_boot_steps(baseline, mok, mirror),
        netplan_files_step(baseline),
        *(_file_step(f, fabric) for f in files if f.path != STAMP_PATH),
        *_modeset_steps(foreign, baseline),
        *_activation_steps(baseline, files, site.inventory.nodes[node].addresses()),
        *_swap_steps(site, baseline),
        Step(kinds.Thp(value=baseline.memory.transparent_hugepages),
             f"transparent hugepages {baseline.memory.transparent_hugepages} (live)", section="memory"),
        *_service_steps(baseline),
        *(_file_step(f) for f in files if f.path == STAMP_PATH),
    ]
    built = [step for step in steps if step.section is None or baseline.manages(step.section)]
    return [_recorded_as(step, name) for step in built]


def _recorded_as(step: Step, baseline: str) -> Step:
    """The step, telling its operation which baseline to record what it creates under (when
    it records: `kinds.Recorded`)."""
    if not isinstance(step.args, kinds.Recorded):
        return step
    return dataclasses.replace(step, args=dataclasses.replace(step.args, baseline=baseline))


def _package_steps(baseline: Baseline) -> list[Step]:
    """One `apt-get update` (only when a pin is missing), then per managed section its
    pinned packages and their holds. The update belongs to the first section with pins."""
    by_section = {section: pins for section, pins in baseline.pins_by_section().items()
                  if baseline.manages(section)}
    if not by_section:
        return []
    every = [_pin_text(pin) for pins in by_section.values() for pin in pins]
    first = next(iter(by_section))
    steps = [Step(kinds.AptUpdate(pins=every), "apt-get update (only when a pin is missing)", section=first)]
    for section, pins in by_section.items():
        count = f"{len(pins)} pinned packages at exact versions" if len(pins) > 1 else \
            "1 pinned package at its exact version"
        steps += [
            Step(kinds.Packages(pins=[_pin_text(p) for p in pins]), f"{section}: {count}", section=section),
            Step(kinds.Hold(names=[pin.name for pin in pins]), f"{section}: hold its pinned packages",
                 section=section),
        ]
    return steps


def _pin_text(pin: PackagePin) -> str:
    return f"{pin.name}={pin.version}"


def _owners(baselines: tuple[str, ...]) -> str:
    return ", ".join(baselines)


def retire_steps(foreign: Foreign, baseline: Baseline) -> list[Step]:
    """Retire what the site's other baselines put on a node and this baseline does not, and
    sparkbase recorded creating (each operation checks the node's ownership record; what it
    did not create, or what changed since, is kept and reported). `foreign` holds only what
    lies in sections this baseline manages (`policy.foreign`): nothing is retired from a
    section left as found.

    Services first (disabled while their unit file still exists), then DKMS builds (before
    their source package goes), then packages of no particular kernel; packages built for
    another kernel only when the node runs this baseline's kernel (after the verified
    reboot), so neither the running kernel nor the next one to boot is ever removed.
    """
    steps = [
        Step(kinds.UnitRetire(unit=unit), f"retire: {unit} disabled and stopped (run only by "
             f"{_owners(owners)})", section="host")
        for unit, owners in foreign.services
    ]
    steps += [
        Step(kinds.DkmsRetire(dkms_name=d.name, version=d.version),
             f"retire: dkms remove {d.name}/{d.version} --all ({_owners(d.baselines)}'s module)",
             section=d.section)
        for d in foreign.dkms
    ]
    steps += [
        Step(kinds.FileRetire(path=path), f"retire: {path} (rendered only by {_owners(owners)})",
             section="host")
        for path, owners in foreign.files
    ]
    steps += _retire_boot_swap(foreign.boot_swap)
    return [*steps, *_retire_packages(foreign, baseline.kernel.release), *_retire_mok(foreign)]


def _retire_boot_swap(owners: tuple[str, ...]) -> list[Step]:
    """Other baselines' boot swap unit: disabled first (it is not run at the next boot),
    then it and its script removed, each only if sparkbase recorded making it unchanged."""
    if not owners:
        return []
    return [
        Step(kinds.UnitRetire(unit=BOOT_SWAP_UNIT),
             f"retire: {BOOT_SWAP_UNIT} disabled (run only by {_owners(owners)})", section="memory"),
        *(Step(kinds.FileRetire(path=path), f"retire: {path} (rendered only by {_owners(owners)})",
               section="memory") for path in (BOOT_SWAP_UNIT_FILE, BOOT_SWAP_SCRIPT)),
    ]


def _retire_packages(foreign: Foreign, target: str) -> list[Step]:
    """Per section, one purge of its plain foreign pins; then one per foreign kernel, gated
    on `target`; then, per section, the report of those sparkbase did not install."""
    steps = []
    sections = [section for section in SECTIONS if any(pin.section == section for pin in foreign.pins)]
    for section in sections:
        plain = [pin.name for pin in foreign.pins if pin.kernel is None and pin.section == section]
        if plain:
            steps.append(Step(kinds.PackagesRetire(names=plain, target_kernel=None),
                              f"retire: unhold and purge {', '.join(plain)} (pinned only by other baselines)",
                              section=section))
    for kernel in sorted({pin.kernel for pin in foreign.pins if pin.kernel is not None}):
        names = [pin.name for pin in foreign.pins if pin.kernel == kernel]
        steps.append(Step(kinds.PackagesRetire(names=names, target_kernel=target),
                          f"retire: unhold and purge the {kernel} kernel packages ({len(names)}; once "
                          f"{target} runs)", section="kernel"))
    for section in sections:
        names = [pin.name for pin in foreign.pins if pin.section == section]
        steps.append(Step(kinds.PackagesKept(names=names), f"keep: other baselines' {section} packages "
                          "sparkbase did not install (reported)", section=section))
    return steps


def _retire_mok(foreign: Foreign) -> list[Step]:
    """The MOK key directories other baselines upload; their enrolled keys are only reported."""
    steps = []
    fingerprints: list[str] = []
    for mok in foreign.mok_dirs:
        steps.append(Step(kinds.MokDirRetire(path=mok.path), f"retire: MOK key directory {mok.path} "
                          f"({_owners(mok.baselines)} signs with it)", section="secure_boot"))
        fingerprints += [key for key in mok.fingerprints if key not in fingerprints]
    if fingerprints:
        steps.append(Step(kinds.MokKept(fingerprints=fingerprints),
                          "keep: MOK keys other baselines enrolled stay in firmware (reported)",
                          section="secure_boot"))
    return steps


def _secure_boot_steps(baseline: Baseline, mok: MokFiles | None, mirror: str | None = None) -> list[Step]:
    """The MOK key pair uploaded and enrolled (secure_boot), when the baseline signs DKMS
    modules, then each DKMS build of a managed section (memory saver, fan control), signed
    with it. With secure_boot left as found, the builds sign with the key the site keeps at
    the baseline's key paths."""
    builds = baseline.dkms_builds()
    if not builds:
        return []
    secure = baseline.secure_boot
    steps: list[Step] = []
    if secure.enabled and baseline.manages("secure_boot"):
        if mok is None:
            what = " and ".join(f"the {build.purpose} module" for build in builds)
            raise DeployConfigError(
                f"{what} must be signed under Secure Boot: give the MOK key "
                "pair with --mok-dir DIR (or $SPARKBASE_MOK_DIR) holding MOK.der and MOK.priv"
            )
        for path in (mok.certificate, mok.private_key):
            if not path.is_file():
                raise DeployConfigError(f"MOK file {path} does not exist")
        if secure.mok_fingerprint is not None and mok.fingerprint() != secure.mok_fingerprint:
            raise DeployConfigError(
                f"MOK certificate {mok.certificate} has fingerprint {mok.fingerprint()}, the "
                f"baseline pins {secure.mok_fingerprint}"
            )
        key_dir = str(Path(secure.mok_private_key).parent)
        steps += [
            Step(kinds.Directory(path=key_dir, mode=0o700), f"MOK directory {key_dir} (0700)",
                 section="secure_boot"),
            Step(
                kinds.Upload(path=secure.mok_certificate, local=str(mok.certificate), mode=0o644),
                f"MOK certificate {secure.mok_certificate}",
                section="secure_boot",
            ),
            Step(
                kinds.Upload(path=secure.mok_private_key, local=str(mok.private_key), mode=0o600),
                f"MOK private key {secure.mok_private_key} (secret)",
                secret=True,
                section="secure_boot",
            ),
            Step(
                kinds.MokImport(certificate=secure.mok_certificate, fingerprint=mok.fingerprint()),
                "import the MOK certificate (a person at the console enrols it at the next boot)",
                reboot=True,
                section="secure_boot",
            ),
        ]
    fingerprint = signing_key(baseline, mok)
    steps += [_source_step(build, mirror) for build in builds
              if build.source is not None and baseline.manages(build.section)]
    steps += [
        Step(
            kinds.DkmsInstall(dkms_name=build.dkms_name, version=build.dkms_version,
                              kernel=baseline.kernel.release, module=build.module, fingerprint=fingerprint),
            f"build and sign {build.dkms_name}/{build.dkms_version} for {baseline.kernel.release} "
            f"({build.purpose})",
            reboot=True,
            section=build.section,
        )
        for build in builds
        if baseline.manages(build.section)
    ]
    return steps


def source_url(build: DkmsBuild, mirror: str | None) -> str:
    """Where the node fetches a build's source tarball: the mirror's NAME-REVISION.tar.gz,
    else the repository host's archive of the revision."""
    assert build.source is not None
    if mirror:
        return f"{mirror.rstrip('/')}/{build.source.tarball(build.dkms_name)}"
    return build.source.archive_url()


def _source_step(build: DkmsBuild, mirror: str | None) -> Step:
    source = build.source
    assert source is not None
    return Step(
        kinds.DkmsSource(dkms_name=build.dkms_name, version=build.dkms_version, url=source_url(build, mirror),
                         sha256=source.sha256),
        f"{build.purpose} source: {source.repository} at {source.revision[:12]} in "
        f"/usr/src/{build.dkms_name}-{build.dkms_version} (sha256 checked, dkms add; recorded)",
        section=build.section,
    )


def signing_key(baseline: Baseline, mok: MokFiles | None) -> str | None:
    """The SHA-1 fingerprint of the MOK the node's DKMS modules are signed with: the pinned
    MOK, else the key this deploy signs with (a site still to confirm its key, the lab's
    own); None without Secure Boot or a key."""
    secure = baseline.secure_boot
    if not secure.enabled:
        return None
    return secure.mok_fingerprint or (mok.fingerprint() if mok is not None else None)


def _modeset_steps(foreign: Foreign, baseline: Baseline) -> list[Step]:
    """Purge the nvidia-drm modeset options package the baseline names (recorded), or put
    back the one other baselines had sparkbase purge; either rebuilds every initramfs."""
    purge = baseline.host.nvidia_drm.purge
    steps = [Step(kinds.ModesetPurge(package=purge), f"purge {purge} and rebuild the initramfs (nvidia-drm "
                  "modeset on)", reboot=True, section="host")] if purge is not None else []
    steps += [
        Step(kinds.ModesetRestore(package=package), f"put back {package} at the version sparkbase purged, "
             f"rebuild the initramfs ({_owners(owners)} purged it)", reboot=True, section="host")
        for package, owners in foreign.restore
    ]
    return steps


def netplan_files_step(baseline: Baseline) -> Step:
    """Only the fabric's netplan file configures the fabric ports: what sparkbase changed in
    other netplan files is put back first, and another file that configures one is refused."""
    path = fabric_netplan_path(baseline)
    return Step(kinds.NetplanFiles(path=path, interfaces=baseline.fabric.netdevs()),
                f"netplan: only {path} configures the fabric ports (sparkbase's edits elsewhere put back)",
                section="fabric")


def _file_step(file: RenderedFile, fabric: dict[str, dict[str, object]] | None = None) -> Step:
    if file.merged:
        return Step(kinds.NetplanTakeover(path=file.path, fabric=fabric or {}, mode=file.mode),
                    f"{file.path} ({file.purpose}: the fabric ports' keys merged in, the site's other keys "
                    "kept; recorded)", reboot=file.needs_reboot, section=file.section)
    return Step(
        kinds.File(path=file.path, content=file.content, mode=file.mode),
        f"{file.path} ({file.purpose})" if file.purpose else file.path,
        reboot=file.needs_reboot,
        section=file.section,
    )


def _activation_steps(baseline: Baseline, files: list[RenderedFile], addresses: dict[str, str]) -> list[Step]:
    """What makes the files take effect without a reboot (or stages it for one), each
    decided from the node's state as well as from its file changing in this run, so a run
    cut short after a file was written is finished by the next one. Each belongs to the
    section of the file it activates."""
    kernel = baseline.kernel
    fabric = baseline.fabric
    links = {port.netdev: {"mtu": fabric.mtu, "addresses": _addresses_of(port.netdev, addresses)}
             for port in fabric.ports}
    modprobe = next((f for f in files if f.path == MODPROBE_PATH), None)
    return [
        Step(
            kinds.GrubUpdate(
                release=kernel.release,
                default_entry=kernel.grub_entry if kernel.pin_grub_default else None,
                cmdline=kernel_cmdline(baseline),
                forbid=list(kernel.cmdline_forbid),
                fallback=kernel.fallback.release if kernel.fallback is not None else None,
                dropin=GRUB_DROPIN_PATH,
            ),
            "update-grub (grub.cfg is older than the GRUB drop-in, or does not boot the baseline as it says)",
            reboot=True,
            after_change_of=GRUB_DROPIN_PATH,
            section="kernel",
        ),
        Step(
            kinds.SysctlApply(file=SYSCTL_PATH, values=sysctls(baseline)),
            f"sysctl -p {SYSCTL_PATH} (live values differ)",
            section="memory",
        ),
        *([Step(
            kinds.DaemonReload(unit=baseline.cpuset.slice),
            f"systemctl daemon-reload (systemd has not loaded {baseline.cpuset.slice} as on disk)",
            after_change_of=f"/etc/systemd/system/{baseline.cpuset.slice}",
            section="cpuset",
        )] if baseline.cpuset.pinned_by == "slice" else []),
        Step(kinds.NetplanApply(links=links), "netplan apply (the live fabric addresses or MTU are not the "
             "netplan's)", after_change_of=fabric_netplan_path(baseline), section="fabric"),
        # nvidia-drm is loaded from the initramfs: its options act once the image is rebuilt
        Step(kinds.InitramfsUpdate(release=kernel.release, path=MODPROBE_PATH,
                                   sha256=modprobe.sha256 if modprobe is not None else None),
             f"update-initramfs -u -k all (the {kernel.release} initramfs lacks the nvidia-drm options)",
             after_change_of=MODPROBE_PATH, reboot=True, section="host"),
    ]


def _addresses_of(netdev: str, addresses: dict[str, str]) -> list[str]:
    """The addresses the fabric netplan gives `netdev` (none for a view with no RDMA path)."""
    return [addresses[netdev]] if netdev in addresses else []


def _swap_steps(site: Site, baseline: Baseline) -> list[Step]:
    """The installer's swap line first (its edits rewrite /etc/fstab whole, guarded), then
    other baselines' swap files retired, then this baseline's swap file (all memory)."""
    swap = baseline.memory.swap
    steps = [
        Step(kinds.FactorySwapRestore(path=path), f"retire: the {path} line of /etc/fstab as sparkbase "
             "found it (another baseline had it marked noauto)", section="memory")
        for path in foreign_fstab_edits(site, baseline)
    ]
    steps += _factory_swap_steps(baseline)
    steps += [
        Step(kinds.SwapRetire(path=path), f"retire: swap file {path} (another baseline's)", section="memory")
        for path in foreign_swap_files(site, baseline)
    ]
    if swap is None:
        return steps
    steps.append(Step(
        kinds.SwapFile(path=swap.path, size_gib=swap.size_gib, header_page_size=swap.header_page_size),
        f"swap file {swap.path} ({swap.size_gib} GiB, {swap.header_page_size}-byte header)",
        section="memory",
    ))
    if baseline.memory.swap_by_page_size:
        steps += _boot_swap_line_steps(swap.path)
    else:
        line = managed_lines(baseline)[0]
        steps.append(Step(kinds.FstabLine(path=line.path, line=line.line, match=line.match),
                          f"{line.path}: {line.line}", section=line.section))
    steps.append(Step(
        kinds.Swapon(path=swap.path, header_page_size=swap.header_page_size),
        f"swapon {swap.path} (when running {swap.header_page_size}-byte pages)",
        section="memory",
    ))
    if baseline.memory.swap_by_page_size:
        steps += _boot_swap_unit_steps(baseline)
    return steps


def _boot_swap_line_steps(path: str) -> list[Step]:
    """Under `swap_by_page_size` the boot unit activates the swap file: the exact /etc/fstab
    line sparkbase wrote for it before (`PATH none swap sw 0 0`) goes, any other line is kept."""
    line = swap_fstab_line(path)
    return [Step(kinds.FstabLineAbsent(path=FSTAB_PATH, match=f"^{_ere_literal(line)}$"),
                 f"{FSTAB_PATH}: no '{line}' line (the boot unit swaps on {path})", section="memory")]


def _ere_literal(text: str) -> str:
    """`text` as a POSIX extended regular expression matching it literally (grep -E and sed
    -E warn about Python's `re.escape` of '-' and spaces)."""
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", text)


def _boot_swap_unit_steps(baseline: Baseline) -> list[Step]:
    """systemd loads the boot swap unit as rendered, then it is enabled (recorded)."""
    choices = ", ".join(f"{path} on {size}-byte pages" for size, path in baseline.memory.swap_files().items())
    return [
        Step(kinds.DaemonReload(unit=BOOT_SWAP_UNIT),
             f"systemctl daemon-reload (systemd has not loaded {BOOT_SWAP_UNIT} as on disk)",
             after_change_of=BOOT_SWAP_UNIT_FILE, section="memory"),
        Step(kinds.UnitEnabled(unit=BOOT_SWAP_UNIT),
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
        args = kinds.FactorySwap(path=factory.path, fstab=factory.fstab, swapoff=factory.swapoff)
        name = f"{factory.path} kept, its /etc/fstab line marked noauto{off} (recorded)"
        return [Step(args, name, section="memory")]
    return [Step(kinds.FactorySwapon(path=factory.path), f"swapon {factory.path} (the installer's swap, when "
                 "the running page size is its header's)", section="memory")]


def _service_steps(baseline: Baseline) -> list[Step]:
    host = baseline.host
    steps = [
        Step(kinds.DefaultTarget(target=host.boot_target), f"boot into {host.boot_target}", section="host"),
    ]
    disable = list(host.disable_services)
    if not host.display_manager and DISPLAY_MANAGER_UNIT not in disable:
        disable.insert(0, DISPLAY_MANAGER_UNIT)
    steps += [Step(kinds.UnitDisabled(unit=unit), f"{unit} disabled and stopped", section="host")
              for unit in disable]
    if host.fan_control is not None:
        unit = host.fan_control.service
        steps.append(Step(kinds.UnitEnabled(unit=unit), f"{unit} enabled and running", section="host"))
    return [*steps, *tuning_steps(baseline)]


def tuning_steps(baseline: Baseline) -> list[Step]:
    """DGX OS's tuning units: the CPU governor (when the baseline manages it) and NVMe
    interrupt coalescing (masking the vendor unit is recorded, so the step records)."""
    host = baseline.host
    steps: list[Step] = []
    if host.cpu_governor is not None:
        steps.append(Step(kinds.CpuGovernor(governor=host.cpu_governor, release=baseline.kernel.release),
                          f"every CPU runs {host.cpu_governor} ({GOVERNOR_UNIT})", section="host"))
    on = host.nvme.interrupt_coalescing
    steps.append(Step(kinds.NvmeCoalescing(on=on),
                      f"NVMe interrupt coalescing {'on (0x107)' if on else 'off (0, unit masked)'} "
                      f"({NVME_COALESCING_UNIT})", section="host"))
    return steps
