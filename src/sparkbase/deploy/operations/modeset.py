"""nvidia-drm modeset by package: purge DGX OS's `nvidia-drm-options-modeset<N>` package (the
variant's recipe: spark-ds41f docs/setup.md "Kernel mode setting"), and put it back.

The package is DGX OS's, not sparkbase's, so both directions go through the node's ownership
record: the purge records the exact version it removed (`Kind.PURGED`); moving back to a
baseline that keeps the package reinstalls that version, and only while the node has not
reinstalled the package itself since (then it is the node's again: kept, reported). Both
rebuild the initramfs of every kernel (the options package acts from there) and need a
reboot. The decisions are pure and tested with no host.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from pyinfra.api.operation import operation

from sparkbase.deploy.node import node_facts, owned_record
from sparkbase.deploy.operations.base import Decision, carry_out
from sparkbase.deploy.operations.packages import APT_INSTALL, installed_versions
from sparkbase.deploy.operations.record import forget, remember
from sparkbase.policy.ownership import KEPT, Kind, OwnershipRecord, created, now_utc

#: the initramfs of every installed kernel, rebuilt after the options package comes or goes
UPDATE_INITRAMFS = ["update-initramfs", "-u", "-k", "all"]


def decide_modeset_purge(package: str, installed: Mapping[str, Collection[str]],
                         held: Collection[str]) -> Decision:
    """Purge `package` when it is installed (unheld first), then rebuild every initramfs."""
    versions = sorted(installed.get(package) or [])
    if not versions:
        return Decision([], f"{package} is not installed (nvidia-drm modeset is not forced off)")
    commands = [["apt-mark", "unhold", package]] if package in held else []
    commands += [["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "purge", "-y", "-q", package],
                 UPDATE_INITRAMFS]
    return Decision(commands, f"purge {package} {'/'.join(versions)}")


@operation()
def modeset_purge(package: str, baseline: str = "") -> Any:
    """Purge DGX OS's nvidia-drm modeset options package and rebuild the initramfs; the
    version removed is recorded so that a move back can reinstall exactly it."""
    installed = installed_versions()
    held = list(node_facts().held) if installed.get(package) else []
    decision = decide_modeset_purge(package, installed, held)
    yield from carry_out(decision)
    if decision.commands:
        version = sorted(installed[package])[0]
        yield from remember(created(Kind.PURGED, package, baseline, now_utc(), version=version))


def decide_modeset_restore(package: str, installed: Mapping[str, Collection[str]],
                           owned: OwnershipRecord) -> Decision:
    """Reinstall the exact version of `package` sparkbase purged, while it is still absent
    (a package the node reinstalled itself since is its own: kept), then rebuild every initramfs."""
    purged = owned.find(Kind.PURGED, package)
    versions = sorted(installed.get(package) or [])
    if purged is None or purged.version is None:
        state = f"installed ({'/'.join(versions)})" if versions else "not installed"
        return Decision([], f"{package} is {state}; sparkbase did not purge it")
    if versions:
        return Decision([], f"{KEPT}{package} {'/'.join(versions)} was reinstalled since sparkbase purged "
                            f"{purged.version}: left as it is")
    return Decision([[*APT_INSTALL, f"{package}={purged.version}"], UPDATE_INITRAMFS],
                    forget=((Kind.PURGED, package),))


@operation()
def modeset_restore(package: str) -> Any:
    """Put back the nvidia-drm modeset options package another baseline had sparkbase purge."""
    installed = installed_versions()
    owned = owned_record()
    decision = decide_modeset_restore(package, installed, owned)
    yield from carry_out(decision)
    if decision.commands:
        yield from forget(decision.forget)
