"""Reboots respect lanes: a node that runs a lane's serving process is not rebooted unless
the lane is drained first, and draining a lane stops it on every node it spans.

A tensor-parallel lane is one job over all its nodes: rebooting one rank takes the whole
lane down (the other ranks hang in their collectives), so a drain stops the lane on each of
the lane's nodes, not only on the node being rebooted, and says so.

How a lane runs comes from its `runtime:` block (`LaneRun`): the match strings that find
its processes, and the systemd unit and/or Docker container that run it. Whether it serves
on a node is decided from the node itself, never from a unit name: the node's processes,
read from its /proc by the runtime probe (`facts.runtime.probe_command`, command lines,
parents and cgroups only) and picked by `lane_group` with the lane's match strings, or its
container running (Docker says so: then the match strings are wrong, and the lane still
runs). A unit can be active with nothing serving, and an engine can serve with no unit.

Draining stops the lane the way it runs, on every node of the lane (`stop_commands`):
`systemctl stop UNIT` first (a unit that starts a container would start it again), then
`docker stop NAME`; a lane with neither cannot be stopped, and the reboot is refused. Then
the nodes are asked again until no process of the lane is left (`leftovers`, a bounded
wait); a process left refuses the reboot, named by PID.

The decisions are pure (`serving_on`, `decide_reboot`, `leftovers`); the runner asks the
nodes (`probe_for`, read back with `facts.runtime.read_runtime`) and stops the lanes.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkbase.facts.runtime import lane_group, probe_command

if TYPE_CHECKING:
    from sparkbase.facts.runtime import RuntimeFacts
    from sparkbase.model.site import Site


@dataclass(frozen=True)
class LaneRun:
    """How one lane runs on its nodes: what finds its processes, and what stops it."""

    lane: str
    nodes: tuple[str, ...]
    #: fixed strings that all occur in a serving process's command line (`runtime.match`)
    match: tuple[str, ...]
    unit: str | None = None
    container: str | None = None

    @property
    def stoppable(self) -> bool:
        """Whether sparkbase knows how to stop it (a unit or a container)."""
        return self.unit is not None or self.container is not None

    def how(self) -> str:
        """`unit U`, `container C`, `unit U, then container C`, or that it has neither."""
        parts = [*([f"unit {self.unit}"] if self.unit else []),
                 *([f"container {self.container}"] if self.container else [])]
        return ", then ".join(parts) or "no unit nor container"


@dataclass(frozen=True)
class Serving:
    """One lane on one node, as the node shows it."""

    lane: str
    #: every process of the lane there (`lane_group` members), PID order
    pids: tuple[int, ...] = ()
    #: its container (`runtime.container`) runs there, as Docker says
    container_running: bool = False

    @property
    def serving(self) -> bool:
        """Whether the lane runs on the node (a process of it, or its container)."""
        return bool(self.pids) or self.container_running

    def evidence(self) -> str:
        """What shows it runs: `pid 1, pid 2`, or its container with no process matching."""
        if self.pids:
            return ", ".join(f"pid {pid}" for pid in self.pids)
        return "its container runs, but no process matches its match strings"


@dataclass(frozen=True)
class Drain:
    """One lane to stop before a reboot: the way it runs, on every node it spans."""

    lane: str
    nodes: tuple[str, ...]
    run: LaneRun

    def describe(self) -> str:
        """`lane X (container C) goes down on all 4 of its nodes: spark1, ...`."""
        spans = f"all {len(self.nodes)} of its nodes" if len(self.nodes) > 1 else "its node"
        return f"lane {self.lane} ({self.run.how()}) goes down on {spans}: {', '.join(self.nodes)}"


@dataclass(frozen=True)
class RebootGate:
    """Whether `node` may reboot now, and which lanes must be drained first."""

    node: str
    running: tuple[str, ...]  # lanes that run on the node
    allowed: bool
    drains: tuple[Drain, ...]
    message: str


def lane_runs(site: Site) -> list[LaneRun]:
    """Every lane with a runtime block: how it is found and how it is stopped."""
    found: list[LaneRun] = []
    for name, lane in sorted(site.lanes.items()):
        runtime = lane.runtime
        if runtime is None:
            continue
        container = runtime.container.name if runtime.container is not None else None
        found.append(LaneRun(name, tuple(lane.nodes), tuple(runtime.match), runtime.unit, container))
    return found


def runs_on(node: str, runs: Iterable[LaneRun]) -> list[LaneRun]:
    """The lanes that span `node` (what to look for there)."""
    return [run for run in runs if node in run.nodes]


def probe_for(runs: Sequence[LaneRun]) -> str:
    """The shell command that reads the lanes' processes (and containers) on a node: the
    runtime probe without the NCCL details (`probe_command(..., detail=False)`)."""
    matches = sorted({run.match[0] for run in runs})
    containers = sorted({run.container for run in runs if run.container is not None})
    return probe_command(matches, containers, detail=False)


def container_names(runs: Iterable[LaneRun]) -> list[str]:
    """The containers the probe asks docker about (`facts.runtime.read_runtime`'s names)."""
    return sorted({run.container for run in runs if run.container is not None})


def serving_on(node: str, runtime: RuntimeFacts, runs: Iterable[LaneRun]) -> dict[str, Serving]:
    """Per lane that spans `node`: whether it runs there, from the node's processes and
    containers (pure)."""
    out: dict[str, Serving] = {}
    for run in runs_on(node, runs):
        group = lane_group(runtime.processes, run.match)
        pids = tuple(p.pid for p in group.members)
        container = next((c for c in runtime.containers.values() if c.name == run.container), None)
        out[run.lane] = Serving(run.lane, pids, container is not None and container.running)
    return out


def stop_commands(run: LaneRun) -> list[str]:
    """How to stop the lane on a node, in order: its unit first (so it does not start the
    container again), then its container (quoted arguments)."""
    commands: list[str] = []
    if run.unit is not None:
        commands.append(shlex.join(["systemctl", "stop", run.unit]))
    if run.container is not None:
        commands.append(shlex.join(["docker", "stop", run.container]))
    return commands


def decide_reboot(node: str, serving: Sequence[Serving], runs: Mapping[str, LaneRun],
                  drain: bool) -> RebootGate:
    """Refuse the reboot of a node that runs a lane, unless `drain`: then every lane that
    runs there is stopped on all of its nodes first. A lane with no way to be stopped (no
    unit, no container) refuses the reboot even with `drain`."""
    running = [s for s in serving if s.serving]
    if not running:
        return RebootGate(node, (), True, (), "")
    names = tuple(s.lane for s in running)
    drains = tuple(Drain(s.lane, runs[s.lane].nodes, runs[s.lane]) for s in running)
    lanes = "; ".join(d.describe() for d in drains)
    stuck = [s for s in running if not runs[s.lane].stoppable]
    if drain and stuck:
        serves = ", ".join(f"{s.lane} ({s.evidence()})" for s in stuck)
        return RebootGate(node, names, False, drains,
                          f"reboot refused: {node} serves {serves}, and the lane has no way to be stopped: "
                          "its runtime names no unit nor container")
    if drain:
        return RebootGate(node, names, True, drains, f"draining before the reboot: {lanes}")
    serves = ", ".join(f"{s.lane} ({s.evidence()})" for s in running)
    return RebootGate(node, names, False, drains,
                      f"reboot refused: {node} serves {serves}: {lanes}; pass --drain to stop it first")


def leftovers(node: str, runtime: RuntimeFacts, drains: Iterable[Drain]) -> dict[str, Serving]:
    """The drained lanes that still run on `node` after their stop (pure)."""
    runs = [d.run for d in drains]
    return {lane: s for lane, s in serving_on(node, runtime, runs).items() if s.serving}


def describe_leftovers(node: str, left: Mapping[str, Serving]) -> str:
    """`spark2: lane X still runs (pid 1, pid 2)`."""
    return "; ".join(f"{node}: lane {lane} still runs ({s.evidence()})" for lane, s in left.items())
