"""DGX OS's tuning units: the CPU governor (nv-cpu-governor.service) and NVMe interrupt
coalescing (nvidia-nvme-interrupt-coalescing.service).

sparkbase owns neither unit. It restarts the governor unit when a CPU runs another governor,
and for coalescing off masks the coalescing unit (the recipe's `systemctl mask --now` and
`nvidia-nvme-interrupt-coalescing.sh disable`), recording the mask with the unit's state
before it (`Kind.MASK`, `original`). Coalescing on undoes only a mask sparkbase recorded and
that is still in place; a unit someone else masked, disabled or removed is left as found,
with a `kept:` note.
"""

from __future__ import annotations

from typing import Any

from pyinfra.api.operation import operation

from sparkbase.deploy.node import node_facts, owned_record
from sparkbase.deploy.operations.base import Decision, carry_out
from sparkbase.deploy.operations.host import unit_state
from sparkbase.deploy.operations.record import forget, remember
from sparkbase.facts.model import UnitState as UnitStateValue
from sparkbase.model.dgxos import (
    GOVERNOR_UNIT,
    NVME_COALESCING_FEATURE,
    NVME_COALESCING_SCRIPT,
    NVME_COALESCING_UNIT,
    NVME_DEVICE,
    coalescing_value,
)
from sparkbase.policy.ownership import KEPT, Kind, OwnedItem, now_utc

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
