"""systemd: `systemctl show -p … UNIT…` blocks and the unit states read from them."""

from __future__ import annotations

from typing import Any

from sparkbase.facts.model import UnitState
from sparkbase.facts.parsers.cpuset import parse_cpu_list
from sparkbase.facts.parsers.lines import node_lines
from sparkbase.facts.script import FactPlan, Read, Reader, cmd


def parse_systemctl_show(text: str, units: list[str]) -> dict[str, dict[str, str]]:
    """`systemctl show -p P1 -p P2 U1 U2…` → unit → property → value.

    systemd prints one block per unit, in the order given, blank lines between blocks; the
    order of properties inside a block is D-Bus's, not the `-p` order. A block also ends
    when a property repeats (an emulator or an old systemd without blank lines).
    """
    blocks: list[dict[str, str]] = [{}]
    for line in node_lines(text):
        if not line.strip():
            if blocks[-1]:
                blocks.append({})
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"unreadable systemctl show line: {line!r}")
        if key in blocks[-1]:
            blocks.append({})
        blocks[-1][key] = value.strip()
    blocks = [block for block in blocks if block]
    if len(blocks) != len(units):
        raise ValueError(f"systemctl show gave {len(blocks)} blocks for {len(units)} units")
    return dict(zip(units, blocks, strict=True))


def unit_state(properties: dict[str, str]) -> UnitState:
    """The two properties the audit and the deploy read, as a `UnitState`."""
    return UnitState(
        unit_file_state=properties.get("UnitFileState", ""),
        active_state=properties.get("ActiveState", ""),
    )


def parse_need_daemon_reload(text: str, unit: str) -> bool | None:
    """`systemctl show -p NeedDaemonReload UNIT` → whether the unit's files changed on disk
    since systemd loaded them (systemd prints the boolean as `yes`/`no`); None when the
    answer holds no such property or another value."""
    try:
        value = parse_systemctl_show(text, [unit])[unit].get("NeedDaemonReload")
    except ValueError:
        return None
    return {"yes": True, "no": False}.get(value or "")


def sections(plan: FactPlan) -> list[Read]:
    """The state of each unit the plan names, and the CPUs its cpuset slice allows."""
    units = [*plan.units, *([plan.slice_unit] if plan.slice_unit else [])]
    show = ("systemctl", "show", "-p", "UnitFileState", "-p", "ActiveState", "-p", "AllowedCPUs")
    return [("units", cmd(*show, *units))] if units else []


def facts(r: Reader, plan: FactPlan) -> dict[str, Any]:
    """The units' `NodeFacts` fields, and the CPUs the cpuset's slice allows."""
    units = [*plan.units, *([plan.slice_unit] if plan.slice_unit else [])]
    shown = r.parse("units", lambda text: parse_systemctl_show(text, units)) or {}
    allowed = shown.get(plan.slice_unit or "", {}).get("AllowedCPUs") if plan.slice_unit else None
    return {
        "units": {unit: unit_state(props) for unit, props in shown.items() if unit in plan.units},
        "slice_allowed_cpus": r.parse("units", lambda _: parse_cpu_list(allowed or "")) if allowed else None,
    }
