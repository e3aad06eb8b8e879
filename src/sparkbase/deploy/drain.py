"""Reboots respect lanes: a node that runs a lane's serving process is not rebooted unless
the lane is drained first, and draining a lane stops it on every node it spans.

A tensor-parallel lane is one job over all its nodes: rebooting one rank takes the whole
lane down (the other ranks hang in their collectives), so a drain stops the lane's units on
each of the lane's nodes, not only on the node being rebooted, and says so.

How a lane is found on a node comes from the lane's `runtime:` block (`runtime.unit`, the
systemd unit that starts it on each node; `LaneUnits` here): the lane serves on a node when
that unit is active there, and draining stops it. A lane without a unit is not found (the
plan says so). Callers may pass the units explicitly (`Options.lanes`).

The decision is pure (`decide_reboot`); the runner asks the nodes (`is_active_command`,
`parse_is_active`) and stops units (`stop_command`).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkbase.model.site import Site


@dataclass(frozen=True)
class LaneUnits:
    """How to find one lane's serving processes: the systemd units that run it on each of
    its nodes (a container runs under a unit too)."""

    lane: str
    nodes: tuple[str, ...]
    units: tuple[str, ...]


@dataclass(frozen=True)
class Drain:
    """One lane to stop before a reboot: its units on every node it spans."""

    lane: str
    nodes: tuple[str, ...]
    units: tuple[str, ...]

    def describe(self) -> str:
        """`lane X (units ...) goes down on spark1, spark2, ...`."""
        spans = f"all {len(self.nodes)} of its nodes" if len(self.nodes) > 1 else "its node"
        return (
            f"lane {self.lane} ({', '.join(self.units)}) goes down on {spans}: {', '.join(self.nodes)}"
        )


@dataclass(frozen=True)
class RebootGate:
    """Whether `node` may reboot now, and which lanes must be drained first."""

    node: str
    running: tuple[str, ...]  # lanes whose units are active on the node
    allowed: bool
    drains: tuple[Drain, ...]
    message: str


def lane_runtimes(site: Site) -> list[LaneUnits]:
    """Every lane whose runtime names systemd units (`runtime.units` or `runtime.unit` of
    the lane model, when the model has a runtime block)."""
    found: list[LaneUnits] = []
    for name, lane in sorted(site.lanes.items()):
        runtime: Any = getattr(lane, "runtime", None)
        if runtime is None:
            continue
        units = list(getattr(runtime, "units", None) or [])
        single = getattr(runtime, "unit", None)
        if single:
            units.append(single)
        if units:
            found.append(LaneUnits(name, tuple(lane.nodes), tuple(dict.fromkeys(str(u) for u in units))))
    return found


def units_on(node: str, runtimes: Iterable[LaneUnits]) -> list[str]:
    """The units of every lane that spans `node` (what to ask the node about)."""
    return list(dict.fromkeys(unit for rt in runtimes if node in rt.nodes for unit in rt.units))


def is_active_command(units: Sequence[str]) -> str:
    """`systemctl is-active U...`: one state line per unit, in order (quoted arguments)."""
    return shlex.join(["systemctl", "is-active", *units])


def parse_is_active(units: Sequence[str], lines: Sequence[str]) -> set[str]:
    """The units `systemctl is-active` called active (or activating/reloading: a process
    runs); a missing line is not active."""
    states = [line.strip() for line in lines if line.strip()]
    running = {"active", "activating", "reloading", "deactivating"}
    return {unit for unit, state in zip(units, states, strict=False) if state in running}


def running_lanes(node: str, active: set[str], runtimes: Iterable[LaneUnits]) -> list[str]:
    """Lanes spanning `node` with at least one unit active there."""
    return [rt.lane for rt in runtimes if node in rt.nodes and active & set(rt.units)]


def stop_command(units: Sequence[str]) -> str:
    """`systemctl stop U...` (quoted arguments)."""
    return shlex.join(["systemctl", "stop", *units])


def decide_reboot(
    node: str, running: Sequence[str], runtimes: Mapping[str, LaneUnits], drain: bool
) -> RebootGate:
    """Refuse the reboot of a node that runs a lane, unless `drain`: then every running lane
    is stopped on all of its nodes first."""
    drains = tuple(Drain(lane, runtimes[lane].nodes, runtimes[lane].units) for lane in running)
    if not running:
        return RebootGate(node, (), True, (), "")
    lanes = "; ".join(d.describe() for d in drains)
    if drain:
        return RebootGate(node, tuple(running), True, drains, f"draining before the reboot: {lanes}")
    return RebootGate(
        node,
        tuple(running),
        False,
        drains,
        f"reboot refused: {node} serves {', '.join(running)}: {lanes}; pass --drain to stop it first",
    )
