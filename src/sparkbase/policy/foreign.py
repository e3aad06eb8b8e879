"""What other baselines of the site put on a node that this node's baseline does not.

A node that moves from one baseline to another and back must end up as if it had always
been on the baseline it carries now. Whatever another baseline of the site manages but
this one does not is *foreign*: its package pins, the services it enables, its
memory-saver DKMS builds, the MOK key directory it uploads and its swap file. The deploy
retires them (`deploy/steps.py`; only what sparkbase recorded creating, see
`policy/ownership.py`) and the audit warns about foreign packages still installed
(`packages.foreign`); both take the list from here, the one place it is computed.

Site policy, below both users: pure functions of the typed site, no host, no pyinfra.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkbase.model.baseline import Baseline
    from sparkbase.model.site import Site


@dataclass(frozen=True)
class ForeignPin:
    """A package another baseline pins and this one does not."""

    name: str
    #: the kernel release the package is built for (never removed while that kernel, or
    #: any kernel but the target, runs), or None for a package of no particular kernel
    kernel: str | None
    #: the baselines that pin it
    baselines: tuple[str, ...]


@dataclass(frozen=True)
class ForeignDkms:
    """A memory-saver DKMS module (name/version) another baseline builds."""

    name: str
    version: str
    baselines: tuple[str, ...]


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

    def package_names(self) -> list[str]:
        """Names of every foreign pin, in a stable order."""
        return [pin.name for pin in self.pins]


def foreign_swap_files(site: Site, baseline: Baseline) -> tuple[str, ...]:
    """Swap files the site's other baselines create and `baseline` does not, sorted."""
    own = baseline.memory.swap.path if baseline.memory.swap is not None else None
    return tuple(
        sorted(
            {
                other.memory.swap.path
                for other in site.baselines.values()
                if other.memory.swap is not None and other.memory.swap.path != own
            }
        )
    )


def foreign_fstab_edits(site: Site, baseline: Baseline) -> tuple[str, ...]:
    """Installer swap files the site's other baselines mark `noauto` in /etc/fstab and
    `baseline` does not (their line is put back, if sparkbase's edit is unchanged), sorted."""
    own = baseline.memory.factory_swap
    keep = own.path if own is not None and own.fstab == "noauto" else None
    return tuple(
        sorted(
            {
                other.memory.factory_swap.path
                for other in site.baselines.values()
                if other.memory.factory_swap is not None
                and other.memory.factory_swap.fstab == "noauto"
                and other.memory.factory_swap.path != keep
            }
        )
    )


def _needs_saver(baseline: Baseline) -> bool:
    saver = baseline.memory.memory_saver
    return saver is not None and saver.required


def _kernel_of(pin_name: str, baseline: Baseline) -> str | None:
    """The kernel release a package is built for: Ubuntu names every such package
    `<stem>-<release>` (linux-image-, linux-headers-, linux-modules-,
    linux-modules-nvidia-580-open-); the baseline's own kernel or its fallback."""
    fallback = baseline.kernel.fallback
    releases = [baseline.kernel.release, *([fallback.release] if fallback is not None else [])]
    return next((release for release in releases if pin_name.endswith(f"-{release}")), None)


def foreign_for(site: Site, name: str) -> Foreign:
    """What the site's other baselines manage that baseline `name` does not."""
    own = site.baselines[name]
    own_pins = {pin.name for pin in own.packages()}
    others = [(other, b) for other, b in sorted(site.baselines.items()) if other != name]

    pins: dict[str, tuple[str | None, list[str]]] = {}
    for other, baseline in others:
        for pin in baseline.packages():
            if pin.name in own_pins:
                continue
            _, owners = pins.setdefault(pin.name, (_kernel_of(pin.name, baseline), []))
            owners.append(other)

    own_units = set(own.host.disable_services)
    if own.host.fan_control is not None:
        own_units.add(own.host.fan_control.service)
    services: dict[str, list[str]] = {}
    for other, baseline in others:
        fan = baseline.host.fan_control
        if fan is not None and fan.service not in own_units:
            services.setdefault(fan.service, []).append(other)

    own_saver = own.memory.memory_saver if _needs_saver(own) else None
    dkms: dict[tuple[str, str], list[str]] = {}
    for other, baseline in others:
        saver = baseline.memory.memory_saver
        if saver is None:
            continue
        key = (saver.dkms_name, saver.dkms_version)
        if own_saver is not None and key == (own_saver.dkms_name, own_saver.dkms_version):
            continue
        dkms.setdefault(key, []).append(other)

    mok_dirs: dict[str, tuple[str, list[str], list[str]]] = {}
    if not (_needs_saver(own) and own.secure_boot.enabled):
        for other, baseline in others:
            secure = baseline.secure_boot
            if not (_needs_saver(baseline) and secure.enabled):
                continue
            path = str(PurePosixPath(secure.mok_private_key).parent)
            _, keys, owners = mok_dirs.setdefault(path, (secure.mok_certificate, [], []))
            if secure.mok_fingerprint and secure.mok_fingerprint not in keys:
                keys.append(secure.mok_fingerprint)
            owners.append(other)

    return Foreign(
        baseline=name,
        pins=tuple(ForeignPin(pin, kernel, tuple(owners)) for pin, (kernel, owners) in sorted(pins.items())),
        services=tuple((unit, tuple(owners)) for unit, owners in sorted(services.items())),
        dkms=tuple(ForeignDkms(n, v, tuple(owners)) for (n, v), owners in sorted(dkms.items())),
        mok_dirs=tuple(
            ForeignMokDir(path, cert, tuple(keys), tuple(owners))
            for path, (cert, keys, owners) in sorted(mok_dirs.items())
        ),
    )
