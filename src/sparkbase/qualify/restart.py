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
- A lane run as a container alone (`runtime.container`, no unit) needs a restarter that runs
  the previous release's image with its settings (`docker stop`, `docker run`): not written
  here; `restarter_for` refuses such a lane until it is wired (marked for the lead).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sparkbase.model.lanes import ContainerRuntime, Lane
    from sparkbase.transport.targets import SshTarget

#: how long one node may take to stop or start the lane's unit
UNIT_COMMAND_TIMEOUT = 180.0


class RestartError(Exception):
    """The lane could not be stopped or started; one line naming the node and unit."""


class LaneRestarter(Protocol):
    """Makes a lane run as one lane file says, having run as another."""

    def describe(self, lane: Lane) -> str:
        """How `lane` runs, for progress lines and records (`unit lane-x.service`)."""
        ...

    def restart(self, running: Lane, wanted: Lane, note: Callable[[str], None]) -> None:
        """Stop what runs as `running` says on every node, start `wanted`; `RestartError`."""
        ...


def unit_of(lane: Lane) -> str | None:
    """The systemd unit that starts the lane, if it names one."""
    return lane.runtime.unit if lane.runtime is not None and lane.runtime.unit else None


def container_of(lane: Lane) -> ContainerRuntime | None:
    """The Docker container the lane runs as, or None."""
    return lane.runtime.container if lane.runtime is not None else None


def lane_image(lane: Lane) -> str | None:
    """The image digest the lane file pins (None: no container)."""
    container = container_of(lane)
    return container.digest() if container is not None else None


Runner = Callable[[str, str], tuple[int, str]]


class UnitRestarter:
    """Restarts a unit lane over SSH (see the module text). `run(node, script)` runs one
    command on a node and returns its exit status and stderr (tests give their own)."""

    def __init__(self, run: Runner) -> None:
        self._run = run

    def describe(self, lane: Lane) -> str:
        """`unit lane-x.service`."""
        return f"unit {unit_of(lane)}"

    def restart(self, running: Lane, wanted: Lane, note: Callable[[str], None]) -> None:
        """Stop `running`'s unit on every node (last rank first), then start `wanted`'s (rank order)."""
        old, new = unit_of(running), unit_of(wanted)
        if old is None or new is None:
            raise RestartError("a unit restart needs runtime.unit in both lane files")
        for node in reversed(running.nodes):
            self._systemctl(node, "stop", old)
        note(f"stopped {old} on {', '.join(running.nodes)}")
        for node in wanted.nodes:
            self._systemctl(node, "start", new)
        note(f"started {new} on {', '.join(wanted.nodes)}")

    def _systemctl(self, node: str, verb: str, unit: str) -> None:
        status, err = self._run(node, f"systemctl {verb} {shlex.quote(unit)}")
        if status != 0:
            why = " ".join(err.split())[-200:] or f"exit status {status}"
            hint = " (is that release's unit installed on the node?)" if verb == "start" else ""
            raise RestartError(f"{node}: systemctl {verb} {unit}: {why}{hint}")


def ssh_runner(targets: Mapping[str, SshTarget]) -> Runner:
    """Run a command on a node over sparkbase's one SSH transport (strict host keys, sudo as the
    inventory says, bounded in time and output)."""
    from sparkbase.transport.client import connect, run_command
    from sparkbase.transport.failure import TransportError

    def run(node: str, script: str) -> tuple[int, str]:
        target = targets.get(node)
        if target is None:
            raise RestartError(f"{node}: not in the inventory")
        try:
            client = connect(target)
        except TransportError as exc:
            raise RestartError(f"{node}: unreachable: {exc}") from None
        try:
            answer = run_command(client, script, UNIT_COMMAND_TIMEOUT, sudo=target.sudo)
        except Exception as exc:  # CommandFailed and the transport's own: this node's reason
            raise RestartError(f"{node}: {script}: {exc}") from None
        finally:
            client.close()
        return answer.exit_status, answer.stderr

    return run


def restarter_for(lanes: Sequence[Lane], targets: Mapping[str, SshTarget]) -> LaneRestarter:
    """The restarter for lanes run as `lanes` say (the candidate and the previous release);
    `RestartError` when one runs in a way no restarter here handles.

    >>> WIRING POINT (for the lead): a lane with `runtime.container` needs a ContainerRestarter
    (`docker stop NAME; docker run` the release's image with its settings, from the
    containers helper's model) returned here; until then such a lane cannot run an A/B/A.
    """
    for lane in lanes:
        if unit_of(lane) is None and container_of(lane) is not None:
            raise RestartError("the lane runs as a container: the container restarter is not wired yet "
                               "(sparkbase.qualify.restart.restarter_for); only the determinism gate can run")
        if unit_of(lane) is None:
            raise RestartError("the lane names no runtime.unit: nothing here can restart it between runs")
    units = {unit_of(lane) for lane in lanes}
    images = {lane_image(lane) for lane in lanes}
    if len(units) == 1 and len(images) > 1:
        raise RestartError(f"the releases run other images under one unit ({units.pop()}): restarting the "
                           "unit cannot bring the previous image back (give each build its own unit)")
    return UnitRestarter(ssh_runner(targets))
