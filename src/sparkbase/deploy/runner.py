"""plan and apply over pyinfra's API, in process: locks, staging, the serial reboot rollout.

One `Session` is one pyinfra `State` over some nodes: connect, prepare every node's
operations in parallel (facts are read, nothing changes), then optionally execute. A
no-op apply is a prepare that finds nothing to do, so it never executes anything.

With `allow_reboot`, nodes whose changes need a reboot are converged one at a time:
stage, reboot, wait for SSH, verify (kernel, page size, command line, modules), then apply
once more for the post-boot steps; the rollout stops at the first node that fails and the
nodes after it are not touched.
"""

from __future__ import annotations

import contextlib
import difflib
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkbase.deploy.drain import (
    Drain,
    LaneUnits,
    RebootGate,
    decide_reboot,
    is_active_command,
    lane_runtimes,
    parse_is_active,
    running_lanes,
    stop_command,
    units_on,
)
from sparkbase.deploy.locks import (
    LockHeld,
    Owner,
    describe_owner,
    local_locks,
    parse_acquire,
    remote_acquire_command,
    remote_break_command,
    remote_release_command,
    stale,
)
from sparkbase.deploy.reboot import boot_mismatches, module_mismatches, reboot_reasons
from sparkbase.deploy.results import NodeResult, NodeStatus, OpResult, Report
from sparkbase.deploy.steps import MokFiles, Step, build_steps
from sparkbase.model.site import Site
from sparkbase.transport import SshTarget, ssh_targets

REBOOT_MARKER = "/run/sparkbase/reboot-pending-marker"

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def patch_gevent() -> None:
    """pyinfra runs hosts in parallel on gevent: patch the standard library once, first."""
    from gevent import monkey

    if not monkey.is_module_patched("socket"):
        monkey.patch_all()


@dataclass
class Options:
    """How a plan or apply runs."""

    lab: Path | None = None
    mok: MokFiles | None = None
    allow_reboot: bool = False
    reboot_timeout: float = 180.0
    diffs: bool = True
    progress: Progress = _stderr
    #: stop the lanes a rebooting node serves (on all their nodes) instead of refusing it
    drain: bool = False
    #: how lanes are found on nodes; None: from the site's lanes (`drain.lane_runtimes`)
    lanes: list[LaneUnits] | None = None


def host_data(target: SshTarget) -> dict[str, Any]:
    """pyinfra host data for one node: strict host keys, the site's or the lab's files."""
    data: dict[str, Any] = {
        "sparkbase_node": target.node,
        "ssh_hostname": target.alias,
        "ssh_user": target.user,
        "ssh_known_hosts_file": str(target.known_hosts),
        "ssh_strict_host_key_checking": "yes",
        "ssh_connect_retries": 0,
    }
    if target.config_file is not None:
        data["ssh_config_file"] = str(target.config_file)
    if target.sudo:
        data["_sudo"] = True
    return data


@dataclass
class Prepared:
    """One node's prepared operations and the facts read alongside them."""

    added: list[Any]
    boot: dict[str, Any]
    mok: dict[str, Any]
    diffs: dict[str, list[str]] = field(default_factory=dict)


class Session:
    """One pyinfra State over `nodes`."""

    def __init__(self, site: Site, nodes: list[str], options: Options, owner: Owner) -> None:
        from pyinfra.api.config import Config
        from pyinfra.api.inventory import Inventory
        from pyinfra.api.state import State

        self.site = site
        self.nodes = nodes
        self.options = options
        self.owner = owner
        targets = ssh_targets(site, options.lab)
        self.targets = targets
        timeout = max(1, int(min(targets[n].connect_timeout for n in nodes)))
        inventory = Inventory(([(n, host_data(targets[n])) for n in nodes], {}))  # type: ignore[no-untyped-call]
        config = Config(CONNECT_TIMEOUT=timeout, PARALLEL=len(nodes))  # type: ignore[no-untyped-call]
        self.state = State(inventory, config)
        self.prepared: dict[str, Prepared] = {}
        self.errors: dict[str, str] = {}

    def host(self, node: str) -> Any:
        """The pyinfra Host of `node`."""
        return self.state.inventory.get_host(node)

    def connect(self) -> list[str]:
        """Connect every node; return those that were unreachable."""
        from pyinfra.api.connect import connect_all
        from pyinfra.api.exceptions import PyinfraError

        with contextlib.suppress(PyinfraError):
            connect_all(self.state)
        down = [n for n in self.nodes if not self.host(n).connected]
        for node in down:
            self.errors[node] = f"unreachable: {why_unreachable(self.targets[node])}"
        return down

    def run(self, node: str, command: str) -> tuple[bool, list[str]]:
        """Run one shell command on `node` outside any operation (under sudo if the inventory says)."""
        from pyinfra.api.command import StringCommand

        sudo = self.targets[node].sudo
        status, output = self.host(node).run_shell_command(StringCommand(command), _sudo=sudo)
        return bool(status), list(output.stdout_lines)

    def lock(self, node: str) -> None:
        """Take the node lock or raise LockHeld; break a stale one (its owner here is gone)."""
        _, lines = self.run(node, remote_acquire_command(self.owner))
        try:
            parse_acquire(node, lines)
        except LockHeld as exc:
            if not stale(exc.owner):
                raise
            self.options.progress(f"{node}: breaking a stale node lock ({describe_owner(exc.owner)}: "
                                  "that process is gone)")
            self.run(node, remote_break_command(exc.owner))
            _, lines = self.run(node, remote_acquire_command(self.owner))
            parse_acquire(node, lines)

    def unlock(self, node: str) -> None:
        """Release the node lock if we hold it (best effort)."""
        if self.host(node).connected:
            self.run(node, remote_release_command(self.owner))

    def prepare(self, nodes: list[str]) -> None:
        """Build and prepare every node's operations in parallel (reads facts only)."""
        import gevent
        from pyinfra.context import ctx_host, ctx_state

        def one(node: str) -> Prepared | Exception:
            try:
                with ctx_host.use(self.host(node)):
                    return self._prepare_host(node)
            except Exception as exc:  # reported per node; the others go on
                return exc

        # the state context is process-global in pyinfra (hosts are greenlet-local): set it
        # around all greenlets, never inside one
        with ctx_state.use(self.state):
            greenlets = {self.state.pool.spawn(one, node): node for node in nodes}
            gevent.joinall(list(greenlets))
        for greenlet, node in greenlets.items():
            result = greenlet.get()
            if isinstance(result, Exception):
                self.errors[node] = f"{type(result).__name__}: {result}"
            else:
                self.prepared[node] = result

    def _prepare_host(self, node: str) -> Prepared:
        from pyinfra.context import host

        from sparkbase.deploy.facts import BootState, FileText, MokState
        from sparkbase.deploy.operations.base import NOOP_REASONS
        from sparkbase.deploy.pyinfra_deploy import add_steps

        NOOP_REASONS.pop(node, None)
        steps = build_steps(self.site, node, self.options.mok)
        boot = host.get_fact(BootState)
        mok = host.get_fact(MokState)
        added = add_steps(steps)
        prepared = Prepared(added, boot, mok)
        if self.options.diffs:
            for op in added:
                if op.step.kind == "file" and op.meta.will_change:
                    path = str(op.step.args["path"])
                    old = host.get_fact(FileText, path=path)
                    prepared.diffs[path] = _unified(path, old, str(op.step.args["content"]))
        return prepared

    def execute(self, nodes: list[str]) -> None:
        """Run the prepared operations of `nodes` (others are skipped)."""
        from pyinfra.api.exceptions import PyinfraError
        from pyinfra.api.operations import run_ops
        from pyinfra.api.state import BaseStateCallback

        progress = self.options.progress
        failures = self.errors
        for node in self.nodes:
            if node not in nodes:
                self.state.ops[self.host(node)].clear()

        class Callback(BaseStateCallback):
            @staticmethod
            def operation_host_start(state: Any, host: Any, op_hash: str) -> None:
                data = state.ops[host].get(op_hash)
                if data is not None and data.operation_meta.will_change:
                    progress(f"{host.name}: {_op_name(state, op_hash)}")

            @staticmethod
            def operation_host_error(state: Any, host: Any, op_hash: str, retry_count: int = 0,
                                     max_retries: int = 0) -> None:
                progress(f"{host.name}: {_op_name(state, op_hash)}: FAILED")
                failures.setdefault(host.name, f"operation failed: {_op_name(state, op_hash)}")

        self.state.add_callback_handler(Callback())  # type: ignore[no-untyped-call]
        try:
            run_ops(self.state)
        except PyinfraError as exc:
            for node in nodes:
                self.errors.setdefault(node, str(exc))

    def failed(self, node: str) -> bool:
        """Whether `node` failed to connect, prepare or execute."""
        return node in self.errors or self.host(node) in self.state.failed_hosts

    def result(self, node: str, executed: bool) -> NodeResult:
        """The node's result from this session."""
        name = self.site.inventory.nodes[node].baseline
        out = NodeResult(node=node, baseline=name)
        prepared = self.prepared.get(node)
        if prepared is None:
            out.status = NodeStatus.FAILED if node not in self.errors or "unreachable" not in \
                self.errors[node] else NodeStatus.UNREACHABLE
            out.message = self.errors.get(node, "")
            return out
        from sparkbase.deploy.operations.base import NOOP_REASONS

        reasons = NOOP_REASONS.get(node, {})
        will: list[Step] = []
        for op in prepared.added:
            meta = op.meta
            if executed and meta.is_complete():
                status = "failed" if meta.did_error() else ("changed" if meta.did_change() else "unchanged")
            elif executed and self.failed(node):
                status = "not run" if meta.will_change else "unchanged"
            else:
                status = "would change" if meta.will_change else "unchanged"
            if meta.will_change:
                will.append(op.step)
            diff = [] if op.step.secret else prepared.diffs.get(str(op.step.args.get("path", "")), [])
            if op.step.kind != "file":
                diff = []
            out.operations.append(
                OpResult(op.step.name, op.step.kind, status, reasons.get(meta._hash, ""), diff)
            )
        baseline = self.site.baselines[name]
        out.reboot_reasons = reboot_reasons(baseline, prepared.boot, prepared.mok, will)
        out.running_kernel = prepared.boot["kernel"]
        if self.failed(node):
            out.status = NodeStatus.FAILED
            out.message = self.errors.get(node, "an operation failed")
        elif out.reboot_reasons:
            out.status = NodeStatus.REBOOT_PENDING
        elif out.changes:
            out.status = NodeStatus.CHANGED if executed else NodeStatus.WOULD_CHANGE
        return out

    def close(self) -> None:
        """Release node locks and disconnect."""
        from pyinfra.api.connect import disconnect_all

        for node in self.nodes:
            if node not in self.errors or "unreachable" not in self.errors[node]:
                with contextlib.suppress(Exception):  # the lock lives in /run; best effort
                    self.unlock(node)
        disconnect_all(self.state)


def why_unreachable(target: SshTarget) -> str:
    """Why pyinfra could not connect, in the audit's words (a refused host key says how to
    verify and enrol it): one strict connection attempt, outside pyinfra."""
    from sparkbase.transport.client import diagnose

    found = diagnose(target)
    return found.message if found is not None else "SSH connection failed (strict host key checking)"


def _op_name(state: Any, op_hash: str) -> str:
    names = state.get_op_meta(op_hash).names
    return ", ".join(sorted(names)) if names else op_hash


def _unified(path: str, old: str | None, new: str) -> list[str]:
    return [
        line.rstrip("\n")
        for line in difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"{path} (node)" if old is not None else "/dev/null",
            tofile=f"{path} (baseline)",
        )
    ]


# --- plan -------------------------------------------------------------------------------------


def plan(site: Site, nodes: list[str], options: Options) -> Report:
    """Dry run: what apply would change on each node, with diffs and reboot needs."""
    patch_gevent()
    report = Report("plan")
    session = Session(site, nodes, options, Owner())
    try:
        down = session.connect()
        session.prepare([n for n in nodes if n not in down])
        for node in nodes:
            result = session.result(node, executed=False)
            if result.status is NodeStatus.REBOOT_PENDING:
                result.status = NodeStatus.WOULD_CHANGE
            report.nodes.append(result)
        rebooting = [r.node for r in report.nodes if r.reboot_reasons and r.node not in session.errors]
        gates = reboot_gates(session, rebooting, _runtimes(site, options), options.drain)
        report.notes += plan_notes(gates, _runtimes(site, options))
    finally:
        _close(session)
    return report


def _runtimes(site: Site, options: Options) -> list[LaneUnits]:
    return options.lanes if options.lanes is not None else lane_runtimes(site)


def reboot_gates(
    session: Session, nodes: list[str], runtimes: list[LaneUnits], drain: bool
) -> dict[str, RebootGate]:
    """For each node that needs a reboot: the lanes it serves now (asked over the session)
    and whether it may reboot."""
    by_lane = {rt.lane: rt for rt in runtimes}
    gates: dict[str, RebootGate] = {}
    for node in nodes:
        units = units_on(node, runtimes)
        active: set[str] = set()
        if units:
            _, lines = session.run(node, is_active_command(units))
            active = parse_is_active(units, lines)
        gates[node] = decide_reboot(node, running_lanes(node, active, runtimes), by_lane, drain)
    return gates


def plan_notes(gates: dict[str, RebootGate], runtimes: list[LaneUnits]) -> list[str]:
    """What `apply --allow-reboot` would do about lanes, for the plan."""
    notes: list[str] = []
    if gates and not runtimes:
        notes.append(
            "note: no lane declares the units that run it; a reboot cannot tell whether a lane serves there"
        )
    for node, gate in gates.items():
        if not gate.running:
            continue
        if gate.allowed:
            notes.append(f"note: {node}: apply --allow-reboot --drain stops first: "
                         + "; ".join(d.describe() for d in gate.drains))
        else:
            notes.append(f"note: {node}: apply --allow-reboot would refuse: {gate.message}")
    return notes


def _close(session: Session) -> None:
    from pyinfra.api.connect import disconnect_all

    disconnect_all(session.state)


# --- apply ------------------------------------------------------------------------------------


def apply(site: Site, nodes: list[str], options: Options) -> Report:
    """Converge `nodes`; stage or (with allow_reboot) roll out reboots one node at a time."""
    patch_gevent()
    owner = Owner()
    report = Report("apply")
    try:
        with local_locks(site.root / ".sparkbase" / "locks", nodes, owner):
            _apply_locked(site, nodes, options, owner, report)
    except LockHeld as exc:
        report.notes.append(str(exc))
        for node in nodes:
            report.nodes.append(NodeResult(node, site.inventory.nodes[node].baseline,
                                           NodeStatus.LOCKED, message=str(exc)))
    return report


def _apply_locked(site: Site, nodes: list[str], options: Options, owner: Owner, report: Report) -> None:
    progress = options.progress
    session = Session(site, nodes, options, owner)
    results: dict[str, NodeResult] = {}
    try:
        down = session.connect()
        reachable = [n for n in nodes if n not in down]
        locked: list[str] = []
        for node in reachable:
            try:
                session.lock(node)
                locked.append(node)
            except LockHeld as exc:
                results[node] = NodeResult(node, site.inventory.nodes[node].baseline,
                                           NodeStatus.LOCKED, message=str(exc))
                progress(str(exc))
        session.prepare(locked)
        planned = {node: session.result(node, executed=False) for node in locked}
        needs_reboot = [n for n in locked if planned[n].reboot_reasons and n not in session.errors]
        gates: dict[str, RebootGate] = {}
        if options.allow_reboot:
            gates = reboot_gates(session, needs_reboot, _runtimes(site, options), options.drain)
        serial = [n for n in needs_reboot if n in gates and gates[n].allowed]
        for node, gate in gates.items():
            if not gate.allowed:
                progress(f"{node}: {gate.message}")
        parallel = [n for n in locked if n not in serial and planned[n].changes and n not in session.errors]
        if parallel:
            progress(f"applying on {', '.join(parallel)}")
            session.execute(parallel)
        for node in nodes:
            if node in results:
                continue
            if node in serial:
                continue
            results[node] = session.result(node, executed=node in parallel)
            held = gates.get(node)
            if held is not None and not held.allowed:
                results[node].message = held.message
    finally:
        session.close()
    failed_at: str | None = None
    drains = list({d.lane: d for n in serial for d in gates[n].drains}.values())
    if drains:
        problem = _drain(site, drains, options, owner)
        if problem is not None:
            failed_at = f"the drain ({problem})"
            progress(f"drain failed: {problem}; no node was rebooted")
        else:
            report.notes += [f"drained: {d.describe()}; start it again after the rollout" for d in drains]
    for node in serial:
        if failed_at is not None:
            results[node] = NodeResult(node, site.inventory.nodes[node].baseline, NodeStatus.NOT_STARTED,
                                       message=f"untouched: the rollout stopped at {failed_at}")
            continue
        results[node] = _rollout_one(site, node, options, owner)
        if results[node].status not in (NodeStatus.CHANGED, NodeStatus.UNCHANGED):
            failed_at = node
            progress(f"{node}: rollout stopped ({results[node].message}); nodes after it are untouched")
    report.nodes = [results[n] for n in nodes]


def _drain(site: Site, drains: list[Drain], options: Options, owner: Owner) -> str | None:
    """Stop each lane's units on every node it spans, then check they stopped; what went
    wrong, or None. Touches only the lanes' units."""
    nodes = list(dict.fromkeys(node for d in drains for node in d.nodes))
    session = Session(site, nodes, options, owner)
    try:
        down = session.connect()
        if down:
            return f"cannot reach {', '.join(down)} to stop its lane units"
        for lane in drains:
            units, where = ", ".join(lane.units), ", ".join(lane.nodes)
            options.progress(f"draining lane {lane.lane}: stopping {units} on {where}")
            for node in lane.nodes:
                stopped, _ = session.run(node, stop_command(lane.units))
                _, lines = session.run(node, is_active_command(lane.units))
                still = parse_is_active(lane.units, lines)
                if not stopped or still:
                    return f"{node}: {', '.join(sorted(still)) or 'systemctl stop'} did not stop"
        return None
    finally:
        _close(session)


def _rollout_one(site: Site, node: str, options: Options, owner: Owner) -> NodeResult:
    """Stage, reboot, verify, finish one node. Never touches another node."""
    progress = options.progress
    stage = Session(site, [node], options, owner)
    try:
        if stage.connect():
            return stage.result(node, executed=False)
        stage.lock(node)
        stage.prepare([node])
        if node in stage.errors:
            return stage.result(node, executed=False)
        progress(f"{node}: staging (one node at a time)")
        stage.execute([node])
        staged = stage.result(node, executed=True)
        if stage.failed(node):
            return staged
        reasons = staged.reboot_reasons
        progress(f"{node}: rebooting ({'; '.join(reasons)})")
        token = uuid.uuid4().hex
        stage.run(node, f"mkdir -p /run/sparkbase && echo {token} > {REBOOT_MARKER}")
        stage.run(node, "nohup sh -c 'sleep 0.5; systemctl reboot' >/dev/null 2>&1 &")
    finally:
        _close(stage)
    target = ssh_targets(site, options.lab)[node]
    if not _wait_rebooted(target, options.reboot_timeout):
        return NodeResult(node, staged.baseline, NodeStatus.FAILED, staged.operations, reasons, True,
                          message=f"did not come back over SSH within {options.reboot_timeout:.0f}s")
    finish = Session(site, [node], options, owner)
    try:
        if finish.connect():
            return NodeResult(node, staged.baseline, NodeStatus.UNREACHABLE, staged.operations, reasons,
                              True, message="unreachable after reboot")
        finish.lock(node)
        finish.prepare([node])
        prepared = finish.prepared.get(node)
        if prepared is None:
            return finish.result(node, executed=False)
        baseline = site.baselines[site.inventory.nodes[node].baseline]
        problems = boot_mismatches(baseline, prepared.boot) + module_mismatches(
            baseline, prepared.boot, prepared.mok
        )
        kernel = prepared.boot["kernel"]
        if problems:
            return NodeResult(node, staged.baseline, NodeStatus.FAILED, staged.operations, problems, True,
                              kernel, message=f"verification failed after reboot, running {kernel}: "
                              + "; ".join(problems))
        progress(f"{node}: back on {kernel} ({prepared.boot['page_size']}-byte pages), verified")
        post = finish.result(node, executed=False)
        if post.changes:
            progress(f"{node}: post-boot steps")
            finish.execute([node])
            post = finish.result(node, executed=True)
        post.operations = [*staged.operations, *[op for op in post.operations if op.status != "unchanged"]]
        post.rebooted = True
        post.running_kernel = kernel
        if post.status in (NodeStatus.UNCHANGED, NodeStatus.CHANGED):
            post.status = NodeStatus.CHANGED
        return post
    finally:
        finish.close()


def _wait_rebooted(target: SshTarget, timeout: float) -> bool:
    """Wait until the node answers SSH again and its /run marker is gone (it rebooted)."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={target.known_hosts}", "-o", "ConnectTimeout=3",
            "-l", target.user]
    if target.config_file is not None:
        argv += ["-F", str(target.config_file)]
    argv += [target.alias, f"test ! -e {shlex.quote(REBOOT_MARKER)}"]
    deadline = time.monotonic() + timeout
    time.sleep(0.5)
    while time.monotonic() < deadline:
        try:
            done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
        except subprocess.TimeoutExpired:
            continue
        if done.returncode == 0:
            return True
        time.sleep(0.3)
    return False
