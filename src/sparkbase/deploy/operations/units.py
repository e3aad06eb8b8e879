"""systemd units: enabled or disabled, and a unit's state as the node's one read has it
(used by the host and memory steps and by retire)."""

from __future__ import annotations

from typing import Any

from pyinfra.api.operation import operation

from sparkbase.deploy.node import node_facts
from sparkbase.deploy.operations.base import cmd, noop
from sparkbase.deploy.operations.record import remember
from sparkbase.facts.model import UnitState
from sparkbase.model.ownership import Kind, created, now_utc


@operation()
def unit_disabled(unit: str) -> Any:
    """The unit is neither enabled nor running (`disable --now`)."""
    current = unit_state(unit)
    # `static` units cannot be disabled, only stopped (the audit's `enabled` counts them)
    enabled = current.unit_file_state in ("enabled", "enabled-runtime", "alias")
    active = current.active_state == "active"
    if not current.unit_file_state and not active:
        noop(f"{unit} is absent (no such unit on the node)")
        return
    if not enabled and not active:
        noop(f"{unit} is {current.unit_file_state} and inactive")
        return
    yield cmd("systemctl", "disable" if enabled else "stop", *(["--now"] if enabled else []), unit)


@operation()
def unit_enabled(unit: str, baseline: str = "") -> Any:
    """The unit is enabled and running (`enable --now`); recorded as sparkbase's when it was
    not enabled before (so other baselines' nodes disable it only then)."""
    current = unit_state(unit)
    if current.unit_file_state == "enabled" and current.active_state == "active":
        noop(f"{unit} is enabled and active")
        return
    yield cmd("systemctl", "enable", "--now", unit)
    if current.unit_file_state != "enabled":
        yield from remember(created(Kind.UNIT, unit, baseline, now_utc()))


def unit_state(unit: str) -> UnitState:
    """A unit's state on the node; a unit that does not exist (or was not read) has an
    empty UnitFileState."""
    return node_facts().units.get(unit) or UnitState("", "")
