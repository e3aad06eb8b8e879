"""Restarting a lane between the runs of an A/B/A comparison, the way the lane runs.

The candidate (A) runs as the site's lane file says, the previous release (B) as the lane
file recorded with that release says; the runner asks a `LaneRestarter` to make the lane run
as one lane file, having run as another. Four Sparks hold one TP4 lane at a time, so a
restart stops the lane on every node before it starts it again, and each start goes through
the gate first (the runner's `gate` callable).

- `UnitRestarter`: a lane started by a systemd unit (`runtime.unit`). On every node of the
  lane, over the one SSH transport (`transport.client`, strict host keys, bounded commands):
  `systemctl stop` of the unit that runs, then `systemctl start` of the one that should. A
  unit lane's build is its unit: two releases of one unit name run the same build, and the
  runner says so (the comparison then measures the session's own noise).
- A lane run by a unit that starts its container restarts as a unit lane; when two releases
  run other images under one unit name, a restart cannot bring the previous image back and
  `restarter_for` refuses.
- `ContainerRestarter`: a lane run as a container alone (`runtime.container`, no unit). The
  site's own container is never removed or changed: it is stopped and started, and while
  another release's image runs it is renamed `NAME.held-by-sparkbase` and the other image
  runs under the lane's name, `docker run` with the site container's own options
  (`facts/parsers/docker_run.py`; a container with options it does not give again is refused
  before anything stops, naming them), `--restart no`, and labels that record which container
  it holds. Putting the candidate back removes only that labelled container and renames the
  site's back. A session cut short leaves that state on the nodes, and `put_back` (run at the
  start of every qualify of a container lane) finishes it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sparkbase.facts.parsers.docker import split_answer
from sparkbase.facts.parsers.docker_run import NotReproducible, RunSpec, run_spec
from sparkbase.gate.records import image_digest
from sparkbase.model.lanes import ContainerRuntime, Lane
from sparkbase.transport.client import connect, run_command
from sparkbase.transport.failure import TransportError
from sparkbase.transport.targets import SshTarget

#: how long one node may take to stop or start the lane's unit or container
UNIT_COMMAND_TIMEOUT = 180.0
#: how long one node may take to pull another release's image (tens of GB), while the lane serves
PULL_TIMEOUT = 1800.0
#: seconds `docker stop` gives the engine before it kills it
STOP_GRACE = 60
#: the name the site's own container holds while another release's image runs under the lane's
HELD_SUFFIX = ".held-by-sparkbase"
#: the label on a container sparkbase ran for a comparison: the id of the site's container it holds
HOLDS_LABEL = "sparkbase.qualify.holds"


class RestartError(Exception):
    """The lane could not be stopped or started; one line naming the node and unit."""


class LaneRestarter(Protocol):
    """Makes a lane run as one lane file says, having run as another."""

    def describe(self, lane: Lane) -> str:
        """How `lane` runs, for progress lines and records (`unit lane-x.service`)."""
        ...

    def restart(self, running: Lane, wanted: Lane, note: Callable[[str], None],
                before_start: Callable[[], None] = lambda: None) -> None:
        """Stop what runs as `running` says on every node, call `before_start` (the gate,
        judging the hosts with the lane stopped: it raises to refuse), start `wanted`;
        `RestartError`."""
        ...


def unit_of(lane: Lane) -> str | None:
    """The systemd unit that starts the lane, if it names one."""
    return lane.runtime.unit if lane.runtime is not None and lane.runtime.unit else None


def container_of(lane: Lane) -> ContainerRuntime | None:
    """The Docker container the lane runs as, or None."""
    return lane.runtime.container if lane.runtime is not None else None


@dataclass(frozen=True)
class Ran:
    """How one command on a node ended."""

    status: int
    out: str
    err: str


#: `run(node, script, timeout)`: one command on one node (tests give their own)
Runner = Callable[[str, str, float], Ran]


def _why(ran: Ran) -> str:
    return " ".join(ran.err.split())[-200:] or f"exit status {ran.status}"


class UnitRestarter:
    """Restarts a unit lane over SSH (see the module text)."""

    def __init__(self, run: Runner) -> None:
        self._run = run

    def describe(self, lane: Lane) -> str:
        """`unit lane-x.service`."""
        return f"unit {unit_of(lane)}"

    def restart(self, running: Lane, wanted: Lane, note: Callable[[str], None],
                before_start: Callable[[], None] = lambda: None) -> None:
        """Stop `running`'s unit on every node (last rank first), `before_start`, then start
        `wanted`'s (rank order)."""
        old, new = unit_of(running), unit_of(wanted)
        if old is None or new is None:
            raise RestartError("a unit restart needs runtime.unit in both lane files")
        for node in reversed(running.nodes):
            self._systemctl(node, "stop", old)
        note(f"stopped {old} on {', '.join(running.nodes)}")
        before_start()
        for node in wanted.nodes:
            self._systemctl(node, "start", new)
        note(f"started {new} on {', '.join(wanted.nodes)}")

    def _systemctl(self, node: str, verb: str, unit: str) -> None:
        ran = self._run(node, f"systemctl {verb} {shlex.quote(unit)}", UNIT_COMMAND_TIMEOUT)
        if ran.status != 0:
            hint = " (is that release's unit installed on the node?)" if verb == "start" else ""
            raise RestartError(f"{node}: systemctl {verb} {unit}: {_why(ran)}{hint}")


@dataclass(frozen=True)
class NodeContainers:
    """The lane's containers on one node: the site's own (under the lane's name or held) and
    the one sparkbase ran in its place, if any."""

    node: str
    site: dict[str, Any]
    site_image: dict[str, Any]
    ours: dict[str, Any] | None

    @property
    def held(self) -> bool:
        """Whether the site's container holds the held name (another image runs, or ran)."""
        return str(self.site.get("Name", "")).lstrip("/").endswith(HELD_SUFFIX)

    def runs_site_image(self, lane: Lane) -> bool:
        """Whether `lane`'s image is the one the site's container was run from."""
        container = container_of(lane)
        digests = self.site_image.get("RepoDigests") or []
        return container is not None and any(str(d).endswith("@" + container.digest()) for d in digests)


def _labels_of(document: dict[str, Any]) -> dict[str, str]:
    labels = (document.get("Config") or {}).get("Labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


class ContainerRestarter:
    """Restarts a lane run as a container alone over SSH (see the module text)."""

    def __init__(self, run: Runner) -> None:
        self._run = run

    def describe(self, lane: Lane) -> str:
        """`container dsv41-flash from sha256:f617afd8e3c1`."""
        container = container_of(lane)
        assert container is not None
        return f"container {container.name} from {container.digest()[:19]}"

    def restart(self, running: Lane, wanted: Lane, note: Callable[[str], None],
                before_start: Callable[[], None] = lambda: None) -> None:
        """Check every node and pull `wanted`'s image first (the lane still serving), then stop
        what runs on every node (last rank first), `before_start`, and start `wanted` (rank
        order)."""
        name = self._name(wanted)
        found = {node: self._read(node, name) for node in wanted.nodes}
        specs = {node: self._spec(state) for node, state in found.items()
                 if not state.runs_site_image(wanted)}
        container = container_of(wanted)
        assert container is not None
        for node in specs:
            self._sh(node, f"docker image inspect {shlex.quote(container.image)} >/dev/null 2>&1 || "
                           f"docker pull -q {shlex.quote(container.image)} >/dev/null", PULL_TIMEOUT)
        for node in reversed(wanted.nodes):
            self._stop(found[node], name)
        note(f"stopped {name} on {', '.join(reversed(wanted.nodes))}")
        before_start()
        for node in wanted.nodes:
            self._start(found[node], name, container, specs.get(node))
        note(f"started {self.describe(wanted)} on {', '.join(wanted.nodes)}")

    def needs_putting_back(self, lane: Lane) -> list[str]:
        """The nodes where the site's container is held or sparkbase's runs in its place."""
        name = self._name(lane)
        states = [self._read(node, name) for node in lane.nodes]
        return [state.node for state in states if state.held or state.ours is not None]

    def _name(self, lane: Lane) -> str:
        container = container_of(lane)
        if container is None:
            raise RestartError("a container restart needs runtime.container in both lane files")
        return container.name

    def _read(self, node: str, name: str) -> NodeContainers:
        held = name + HELD_SUFFIX
        ran = self._run(node, f"docker inspect --type container {shlex.quote(name)} {shlex.quote(held)}",
                        UNIT_COMMAND_TIMEOUT)
        found = _inspected(node, ran)
        by_name = {str(d.get("Name", "")).lstrip("/"): d for d in found}
        at_name, at_held = by_name.get(name), by_name.get(held)
        ours = at_name if at_name is not None and HOLDS_LABEL in _labels_of(at_name) else None
        site = at_held if at_held is not None else (at_name if ours is None else None)
        if site is None:
            raise RestartError(f"{node}: no container {name} of the site's (nothing to restart)")
        if ours is not None and _labels_of(ours)[HOLDS_LABEL] != site.get("Id"):
            raise RestartError(f"{node}: {name} was run by sparkbase for another container "
                               f"({_labels_of(ours)[HOLDS_LABEL][:12]}), not {held}: put them back by hand")
        if at_held is not None and at_name is not None and ours is None:
            raise RestartError(f"{node}: both {name} and {held} exist and neither is sparkbase's: "
                               "left as they are")
        image_ran = self._run(node, f"docker image inspect {shlex.quote(str(site.get('Image', '')))}",
                              UNIT_COMMAND_TIMEOUT)
        images = _inspected(node, image_ran)
        return NodeContainers(node, site, images[0] if images else {}, ours)

    def _spec(self, state: NodeContainers) -> RunSpec:
        try:
            return run_spec(state.site, state.site_image)
        except NotReproducible as exc:
            raise RestartError(f"{state.node}: the site's container has options a comparison cannot give "
                               f"another image: {exc} (nothing was stopped)") from None

    def _stop(self, state: NodeContainers, name: str) -> None:
        if state.ours is not None:
            self._sh(state.node, f"docker rm -f {shlex.quote(str(state.ours['Id']))} >/dev/null")
        elif not state.held:
            self._sh(state.node, f"docker stop -t {STOP_GRACE} {shlex.quote(name)} >/dev/null")

    def _start(self, state: NodeContainers, name: str, container: ContainerRuntime,
               spec: RunSpec | None) -> None:
        held = name + HELD_SUFFIX
        if spec is None:
            if state.held:
                self._sh(state.node, f"docker rename {shlex.quote(held)} {shlex.quote(name)}")
            self._sh(state.node, f"docker start {shlex.quote(name)} >/dev/null")
            return
        if not state.held:
            self._sh(state.node, f"docker rename {shlex.quote(name)} {shlex.quote(held)}")
        argv = spec.argv(name, container.image, {HOLDS_LABEL: str(state.site["Id"])})
        self._sh(state.node, shlex.join(argv) + " >/dev/null")

    def _sh(self, node: str, script: str, timeout: float = UNIT_COMMAND_TIMEOUT) -> None:
        ran = self._run(node, script, timeout)
        if ran.status != 0:
            raise RestartError(f"{node}: {script.removesuffix(' >/dev/null')[:160]}: {_why(ran)}")


def _inspected(node: str, ran: Ran) -> list[dict[str, Any]]:
    """The objects of a `docker inspect` answer (names it does not know left out, as docker does)."""
    text, notes = split_answer(ran.out + "\n" + ran.err)
    if text is None:
        raise RestartError(f"{node}: docker inspect: {' '.join(notes)[-200:] or f'exit status {ran.status}'}")
    documents = json.loads(text)
    return [d for d in documents if isinstance(d, dict)]


def ssh_runner(targets: Mapping[str, SshTarget]) -> Runner:
    """Run a command on a node over sparkbase's one SSH transport (strict host keys, sudo as the
    inventory says, bounded in time and output)."""
    def run(node: str, script: str, timeout: float) -> Ran:
        target = targets.get(node)
        if target is None:
            raise RestartError(f"{node}: not in the inventory")
        try:
            client = connect(target)
        except TransportError as exc:
            raise RestartError(f"{node}: unreachable: {exc}") from None
        try:
            answer = run_command(client, script, timeout, sudo=target.sudo)
        except Exception as exc:  # CommandFailed and the transport's own: this node's reason
            raise RestartError(f"{node}: {script}: {exc}") from None
        finally:
            client.close()
        return Ran(answer.exit_status, answer.stdout, answer.stderr)

    return run


def restarter_for(lanes: Sequence[Lane], targets: Mapping[str, SshTarget]) -> LaneRestarter:
    """The restarter for lanes run as `lanes` say (the candidate and the previous release);
    `RestartError` when one runs in a way no restarter here handles."""
    if all(unit_of(lane) is None and container_of(lane) is not None for lane in lanes):
        names = {container.name for lane in lanes if (container := container_of(lane)) is not None}
        if len(names) > 1:
            raise RestartError(f"the releases run under other container names ({', '.join(sorted(names))}): "
                               "a comparison restarts one container name")
        return ContainerRestarter(ssh_runner(targets))
    for lane in lanes:
        if unit_of(lane) is None and container_of(lane) is not None:
            raise RestartError("one release runs as a container alone and another by a unit: "
                               "nothing here restarts the lane from one to the other")
        if unit_of(lane) is None:
            raise RestartError("the lane names no runtime.unit: nothing here can restart it between runs")
    units = {unit_of(lane) for lane in lanes}
    images = {image_digest(lane) for lane in lanes}
    if len(units) == 1 and len(images) > 1:
        raise RestartError(f"the releases run other images under one unit ({units.pop()}): restarting the "
                           "unit cannot bring the previous image back (give each build its own unit)")
    return UnitRestarter(ssh_runner(targets))


def put_back(lane: Lane, targets: Mapping[str, SshTarget], note: Callable[[str], None]) -> None:
    """Finish what a comparison cut short on a lane run as a container alone: where the site's
    container is held or sparkbase's runs in its place, remove sparkbase's and start the site's
    again (said); nothing for any other lane. `RestartError` when it cannot."""
    if unit_of(lane) is not None or container_of(lane) is None:
        return
    restarter = ContainerRestarter(ssh_runner(targets))
    left = restarter.needs_putting_back(lane)
    if left:
        note(f"an earlier comparison left the lane's container held on {', '.join(left)}: putting it back")
        restarter.restart(lane, lane, note)
