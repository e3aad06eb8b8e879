"""Host operations (section `host`): the default target, DGX OS's tuning units, and
nvidia-drm modeset by package.

DGX OS's tuning units: the CPU governor (nv-cpu-governor.service) and NVMe interrupt
coalescing (nvidia-nvme-interrupt-coalescing.service). sparkbase owns neither unit. It
restarts the governor unit when a CPU runs another governor, and for coalescing off masks the
coalescing unit (the recipe's `systemctl mask --now` and `nvidia-nvme-interrupt-coalescing.sh
disable`), recording the mask with the unit's state before it (`Kind.MASK`, `original`).
Coalescing on undoes only a mask sparkbase recorded and that is still in place; a unit
someone else masked, disabled or removed is left as found, with a `kept:` note.

nvidia-drm modeset by package: purge DGX OS's `nvidia-drm-options-modeset<N>` package (the
variant's recipe: spark-ds41f docs/setup.md "Kernel mode setting"), and put it back. The
package is DGX OS's, not sparkbase's, so both directions go through the node's ownership
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
from sparkbase.deploy.operations.base import Decision, carry_out, cmd, noop
from sparkbase.deploy.operations.packages import APT_INSTALL, installed_versions
from sparkbase.deploy.operations.record import forget, remember
from sparkbase.deploy.operations.units import unit_state
from sparkbase.facts.model import UnitState as UnitStateValue
from sparkbase.model.host import (
    GOVERNOR_UNIT,
    NVME_COALESCING_FEATURE,
    NVME_COALESCING_SCRIPT,
    NVME_COALESCING_UNIT,
    NVME_DEVICE,
    coalescing_value,
)
from sparkbase.model.ownership import Kind, OwnedItem, OwnershipRecord, created, now_utc
from sparkbase.policy.ownership import KEPT


@operation()
def default_target(target: str) -> Any:
    """`systemctl set-default`."""
    if node_facts().default_target == target:
        noop(f"default target is {target}")
        return
    yield cmd("systemctl", "set-default", target)


#: what a masked unit's UnitFileState reads
MASKED = "masked"


def decide_governor(governor: str, release: str, running: str, unit: UnitStateValue,
                    governors: dict[int, str]) -> Decision:
    """Restart the governor unit when a CPU runs another governor, on the baseline's kernel
    only (the unit runs that kernel's cpupower; another kernel is fixed by the reboot)."""
    wrong = sorted(cpu for cpu, seen in governors.items() if seen != governor)
    if governors and not wrong and unit.active_state != "failed":
        return Decision([], f"every CPU runs {governor}")
    if running != release:
        return Decision([], f"runs {running or 'an unknown kernel'}: {GOVERNOR_UNIT} sets {governor} "
                            f"at the next boot into {release}")
    if not unit.unit_file_state:
        return Decision([], f"{KEPT}{GOVERNOR_UNIT} is not installed (DGX OS's nv-cpu-governor): "
                            "sparkbase installs no vendor unit")
    if unit.unit_file_state not in ("enabled", "enabled-runtime", "static", "alias"):
        return Decision([], f"{KEPT}{GOVERNOR_UNIT} is {unit.unit_file_state}, not by sparkbase: "
                            "left as found (enable it by hand)")
    return Decision([["systemctl", "restart", GOVERNOR_UNIT]])


@operation()
def cpu_governor(governor: str, release: str) -> Any:
    """Every CPU runs `governor`, as nv-cpu-governor.service sets it."""
    facts = node_facts()
    running, unit = facts.kernel_release or "", unit_state(GOVERNOR_UNIT)
    yield from carry_out(decide_governor(governor, release, running, unit, facts.governors))


def _set_feature(value: int) -> list[str]:
    feature = f"{NVME_COALESCING_FEATURE:#04x}"
    return ["nvme", "set-feature", NVME_DEVICE, "-f", feature, f"--value={value:#x}"]


def decide_coalescing_off(unit: UnitStateValue, value: int | None) -> Decision:
    """Mask the unit (it would turn coalescing back on at boot) and write 0 now."""
    commands: list[list[str]] = []
    installed = bool(unit.unit_file_state)
    if installed and unit.unit_file_state != MASKED:
        commands.append(["systemctl", "mask", "--now", NVME_COALESCING_UNIT])
    if value != coalescing_value(False) or commands:
        commands.append([NVME_COALESCING_SCRIPT, "disable"] if installed else _set_feature(0))
    return Decision(commands, "coalescing off: feature 0x08 = 0, "
                              f"{NVME_COALESCING_UNIT} {'masked' if installed else 'not installed'}")


def decide_coalescing_on(unit: UnitStateValue, value: int | None, mask: OwnedItem | None) -> Decision:
    """Undo sparkbase's own mask (unchanged since), then start the unit; anything else that
    keeps coalescing off is left as found."""
    state = unit.unit_file_state
    name = NVME_COALESCING_UNIT
    if mask is not None and state == MASKED:
        commands = [["systemctl", "unmask", NVME_COALESCING_UNIT]]
        if mask.original in ("enabled", "enabled-runtime"):
            commands.append(["systemctl", "enable", NVME_COALESCING_UNIT])
        commands.append(["systemctl", "start", NVME_COALESCING_UNIT])
        return Decision(commands, forget=((Kind.MASK, NVME_COALESCING_UNIT),))
    stale: tuple[tuple[Kind, str], ...] = ((Kind.MASK, NVME_COALESCING_UNIT),) if mask is not None else ()
    if not state:
        return Decision([], f"{KEPT}{NVME_COALESCING_UNIT} is not installed (DGX OS's nvidia-nvme-options): "
                            "sparkbase installs no vendor unit", stale)
    if state == MASKED:
        return Decision([], f"{KEPT}{NVME_COALESCING_UNIT} is masked, not by sparkbase: left masked", stale)
    if state not in ("enabled", "enabled-runtime", "static", "alias"):
        return Decision([], f"{KEPT}{name} is {state}, not by sparkbase: left as found", stale)
    if value == coalescing_value(True):
        return Decision([], f"coalescing on: feature 0x08 = {value:#x}, {name} {state}", stale)
    return Decision([["systemctl", "restart", NVME_COALESCING_UNIT]], forget=stale)


@operation()
def nvme_coalescing(on: bool, baseline: str = "") -> Any:
    """NVMe interrupt coalescing as the baseline says (see the module docstring)."""
    value = node_facts().nvme_coalescing
    unit = unit_state(NVME_COALESCING_UNIT)
    mask = owned_record().find(Kind.MASK, NVME_COALESCING_UNIT)
    decision = decide_coalescing_on(unit, value, mask) if on else decide_coalescing_off(unit, value)
    yield from carry_out(decision)
    if not on and decision.commands and unit.unit_file_state not in ("", MASKED) and mask is None:
        yield from remember(OwnedItem(kind=Kind.MASK, target=NVME_COALESCING_UNIT, baseline=baseline,
                                      recorded_at=now_utc(), original=unit.unit_file_state, written=MASKED))
    if decision.forget:
        yield from forget(decision.forget)


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
