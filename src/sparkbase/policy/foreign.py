"""What other baselines of the site put on a node that this node's baseline does not.

A node that moves from one baseline to another and back must end up as if it had always
been on the baseline it carries now. Whatever another baseline of the site manages but
this one does not is *foreign*: its package pins (and those an earlier version of any
baseline pinned, `retired_packages`), the services it enables, its
DKMS builds (memory saver, fan control), the MOK key directory it uploads, its swap file
and the boot unit that chooses one by page size, its fan module's modules-load.d entry and
the DGX OS package it purges (put back). The deploy
retires them (`deploy/steps.py`; only what sparkbase recorded creating, see
`policy/ownership.py`) and the audit warns about foreign packages still installed
(`packages.foreign`); both take the list from here, the one place it is computed.

Only sections count that both baselines manage (`managed:`): another baseline puts nothing
on a node in a section it leaves as found, and in a section this baseline leaves as found
nothing is retired, whoever put it there.

Site policy, below both users: pure functions of the typed site, no host, no pyinfra.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkbase.model.baseline import Baseline
    from sparkbase.model.sections import Section
    from sparkbase.model.site import Site


@dataclass(frozen=True)
class ForeignPin:
    """A package another baseline pins and this one does not."""

    name: str
    #: the kernel release the package is built for (never removed while that kernel, or
    #: any kernel but the target, runs), or None for a package of no particular kernel
    kernel: str | None
    #: the baselines that pin it (`earlier versions of NAME`: `retired_packages`)
    baselines: tuple[str, ...]
    #: the section it belongs to (`Baseline.pins_by_section`)
    section: Section


@dataclass(frozen=True)
class ForeignDkms:
    """A DKMS module (name/version: memory saver, fan control) another baseline builds."""

    name: str
    version: str
    baselines: tuple[str, ...]
    #: the section whose steps build it (`memory` for the memory saver, `host` for fan control)
    section: Section


@dataclass(frozen=True)
class ForeignMokDir:
    """The directory another baseline uploads the MOK key pair to, and its pinned keys."""

    path: str
    certificate: str
    #: SHA-1 fingerprints the other baselines pin (what sparkbase would have uploaded)
    fingerprints: tuple[str, ...]
    baselines: tuple[str, ...]


@dataclass(frozen=True)
class Foreign:
    """Everything the site's other baselines manage that `baseline` does not."""

    baseline: str
    pins: tuple[ForeignPin, ...] = ()
    services: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (unit, baselines)
    dkms: tuple[ForeignDkms, ...] = ()
    mok_dirs: tuple[ForeignMokDir, ...] = ()
    #: files other baselines render and this one does not (path, baselines): the fan-control
    #: module's modules-load.d entry
    files: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: DGX OS packages other baselines purge and this one (modeset off) keeps (name,
    #: baselines): put back at the version sparkbase removed (`host.nvidia_drm.purge`)
    restore: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: the baselines whose boot unit chooses the swap file by page size while this one has
    #: none (`memory.swap_by_page_size`): the unit is disabled, it and its script retired
    boot_swap: tuple[str, ...] = ()

    def package_names(self) -> list[str]:
        """Names of every foreign pin, in a stable order."""
        return [pin.name for pin in self.pins]


def foreign_swap_files(site: Site, baseline: Baseline) -> tuple[str, ...]:
    """Swap files the site's other baselines create and `baseline` does not, sorted (none
    when `baseline` leaves memory as found)."""
    if not baseline.manages("memory"):
        return ()
    own = baseline.memory.swap.path if baseline.memory.swap is not None else None
    return tuple(
        sorted(
            {
                other.memory.swap.path
                for other in site.baselines.values()
                if other.manages("memory") and other.memory.swap is not None and other.memory.swap.path != own
            }
        )
    )


def foreign_fstab_edits(site: Site, baseline: Baseline) -> tuple[str, ...]:
    """Installer swap files the site's other baselines mark `noauto` in /etc/fstab and
    `baseline` does not (their line is put back, if sparkbase's edit is unchanged), sorted
    (none when `baseline` leaves memory as found)."""
    if not baseline.manages("memory"):
        return ()
    own = baseline.memory.factory_swap
    keep = own.path if own is not None and own.fstab == "noauto" else None
    return tuple(
        sorted(
            {
                other.memory.factory_swap.path
                for other in site.baselines.values()
                if other.manages("memory") and other.memory.factory_swap is not None
                and other.memory.factory_swap.fstab == "noauto"
                and other.memory.factory_swap.path != keep
            }
        )
    )


def _signs_modules(baseline: Baseline) -> bool:
    """Whether apply uploads the MOK key pair to sign DKMS builds (memory saver, fan control)."""
    return bool(baseline.dkms_builds()) and baseline.secure_boot.enabled


def _kernel_of(pin_name: str, baseline: Baseline) -> str | None:
    """The kernel release a package is built for: Ubuntu names every such package
    `<stem>-<release>` (linux-image-, linux-headers-, linux-modules-,
    linux-modules-nvidia-580-open-); the baseline's own kernel or its fallback."""
    fallback = baseline.kernel.fallback
    releases = [baseline.kernel.release, *([fallback.release] if fallback is not None else [])]
    return next((release for release in releases if pin_name.endswith(f"-{release}")), None)


def _ships_own_library(own: Baseline, other: Baseline, package: str) -> bool:
    """`package` is the other baseline's NCCL package and ships the very file `own` takes as
    the site's (`provided_by: site`, same path): purging it would delete the library every
    lane loads, so it is never foreign."""
    library = own.nccl.library
    theirs = other.nccl.library
    return library.provided_by == "site" and theirs.package == package and theirs.path == library.path


def foreign_for(site: Site, name: str) -> Foreign:
    """What the site's other baselines manage that baseline `name` does not, in the sections
    both manage."""
    own = site.baselines[name]
    own_pins = {pin.name for pin in own.packages()}
    others = [(other, b) for other, b in sorted(site.baselines.items()) if other != name]

    def both(baseline: Baseline, section: Section) -> bool:
        return own.manages(section) and baseline.manages(section)

    pins: dict[str, tuple[str | None, Section, list[str]]] = {}
    for other, baseline in others:
        for section, section_pins in baseline.pins_by_section().items():
            if not both(baseline, section):
                continue
            for pin in section_pins:
                if pin.name in own_pins or _ships_own_library(own, baseline, pin.name):
                    continue
                _, _, owners = pins.setdefault(pin.name, (_kernel_of(pin.name, baseline), section, []))
                owners.append(other)
    # what earlier versions of any baseline (this one too) pinned and no baseline pins now; an
    # NCCL package is kept where the site provides the library itself: it may ship that very
    # file (`_ships_own_library`), and a retired pin no longer says which path it shipped
    site_library = own.nccl.library.provided_by == "site"
    for other, baseline in sorted(site.baselines.items()):
        for retired in baseline.retired_packages:
            if site_library and retired.section == "nccl":
                continue
            if retired.name not in own_pins and both(baseline, retired.section):
                _, _, owners = pins.setdefault(retired.name, (None, retired.section, []))
                owners.append(f"earlier versions of {other}")

    own_units = set(own.host.disable_services)
    if own.host.fan_control is not None:
        own_units.add(own.host.fan_control.service)
    services: dict[str, list[str]] = {}
    for other, baseline in others:
        fan = baseline.host.fan_control
        if fan is not None and fan.service not in own_units and both(baseline, "host"):
            services.setdefault(fan.service, []).append(other)

    own_builds = {(build.dkms_name, build.dkms_version) for build in own.dkms_builds()}
    dkms: dict[tuple[str, str], tuple[Section, list[str]]] = {}
    for other, baseline in others:
        saver = baseline.memory.memory_saver
        builds: list[tuple[tuple[str, str], Section]] = (
            [((saver.dkms_name, saver.dkms_version), "memory")] if saver is not None else [])
        fan = baseline.host.fan_control
        builds += [((fan.dkms_name, fan.dkms_version), "host")] if fan is not None else []
        for key, section in builds:
            if key not in own_builds and both(baseline, section):
                dkms.setdefault(key, (section, []))[1].append(other)

    mok_dirs: dict[str, tuple[str, list[str], list[str]]] = {}
    if not _signs_modules(own) and own.manages("secure_boot"):
        for other, baseline in others:
            secure = baseline.secure_boot
            if not _signs_modules(baseline) or not baseline.manages("secure_boot"):
                continue
            path = str(PurePosixPath(secure.mok_private_key).parent)
            _, keys, owners = mok_dirs.setdefault(path, (secure.mok_certificate, [], []))
            if secure.mok_fingerprint and secure.mok_fingerprint not in keys:
                keys.append(secure.mok_fingerprint)
            owners.append(other)

    own_fan = own.host.fan_control.modules_load_path if own.host.fan_control is not None else None
    files: dict[str, list[str]] = {}
    restore: dict[str, list[str]] = {}
    for other, baseline in others:
        if not both(baseline, "host"):
            continue
        fan = baseline.host.fan_control
        if fan is not None and fan.modules_load_path != own_fan:
            files.setdefault(fan.modules_load_path, []).append(other)
        purged = baseline.host.nvidia_drm.purge
        # put back only where this baseline wants modeset off (the package forces it off)
        if purged is not None and purged != own.host.nvidia_drm.purge and not own.host.nvidia_drm.modeset:
            restore.setdefault(purged, []).append(other)

    boot_swap = () if own.memory.swap_by_page_size else tuple(
        other for other, baseline in others if baseline.memory.swap_by_page_size and both(baseline, "memory"))

    return Foreign(
        baseline=name,
        boot_swap=boot_swap,
        pins=tuple(ForeignPin(pin, kernel, tuple(owners), section)
                   for pin, (kernel, section, owners) in sorted(pins.items())),
        services=tuple((unit, tuple(owners)) for unit, owners in sorted(services.items())),
        dkms=tuple(ForeignDkms(n, v, tuple(owners), section)
                   for (n, v), (section, owners) in sorted(dkms.items())),
        mok_dirs=tuple(
            ForeignMokDir(path, cert, tuple(keys), tuple(owners))
            for path, (cert, keys, owners) in sorted(mok_dirs.items())
        ),
        files=tuple((path, tuple(owners)) for path, owners in sorted(files.items())),
        restore=tuple((pkg, tuple(owners)) for pkg, owners in sorted(restore.items())),
    )
