"""One pyinfra session over a set of nodes: connect, lock, prepare, execute, results; and `plan`.

A `Session` is one pyinfra `State` over some nodes: connect, prepare every node's
operations in parallel (facts are read, nothing changes), then optionally execute. A
no-op apply is a prepare that finds nothing to do, so it never executes anything.

pyinfra is used through its documented API only (docs.pyinfra.com, 3.x: `State`,
`Inventory`, `Config`, `connect_all`, `run_ops`, `BaseStateCallback`,
`State.get_op_data_for_host`, `Host.get_fact`/`run_shell_command`, the `_if` and `_sudo`
global arguments, `OperationMeta.will_change`/`is_complete`/`did_change`/`did_error`);
`tests/unit/test_pyinfra_api.py` fails when any of them moves. No-op reasons come from
the operations themselves (`operations.noop_reasons`), failures from the callbacks.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbase.deploy.areas.dkms import signing_key
from sparkbase.deploy.areas.fabric import NetplanTakeover
from sparkbase.deploy.areas.files import File
from sparkbase.deploy.areas.secure_boot import MokImport
from sparkbase.deploy.drain import (
    LaneRun,
    RebootGate,
    Serving,
    container_names,
    decide_reboot,
    lane_runs,
    probe_for,
    runs_on,
    serving_on,
)
from sparkbase.deploy.kinds import Step, Writes
from sparkbase.deploy.locks import Owner, acquire_node_lock, remote_release_command
from sparkbase.deploy.mok_keys import MokFiles
from sparkbase.deploy.reboot import mok_enrolment, reboot_reasons, stage_command, staged
from sparkbase.deploy.results import NodeResult, NodeStatus, OpResult, Report
from sparkbase.deploy.sources import source_mirror
from sparkbase.deploy.steps import build_steps
from sparkbase.model.site import Site
from sparkbase.transport import FailureKind, NodeFailure, SshTarget, TransportError, ssh_targets
from sparkbase.transport.feeds import pyinfra_host_data

if TYPE_CHECKING:  # pyinfra is imported after gevent patches the standard library
    from sparkbase.deploy.pyinfra_deploy import AddedOp

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
    #: how lanes are found on nodes and stopped; None: from the site's lanes (`drain.lane_runs`)
    lanes: list[LaneRun] | None = None
    #: seconds a drain waits for the lanes' processes to end after stopping them
    drain_timeout: float = 120.0


def host_data(target: SshTarget) -> dict[str, Any]:
    """pyinfra host data for one node (`transport.feeds.pyinfra_host_data`)."""
    return pyinfra_host_data(target)


@dataclass
class Prepared:
    """One node's prepared operations and the facts read alongside them."""

    added: list[AddedOp]
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
        #: the nodes whose operations run when the session executes (pyinfra's `_if`)
        self.executing: set[str] = set()
        timeout = max(1, int(min(targets[n].connect_timeout for n in nodes)))
        hosts = [(n, {**host_data(targets[n]), "_if": self._runs_on(n)}) for n in nodes]
        inventory = Inventory((hosts, {}))  # type: ignore[no-untyped-call]
        config = Config(CONNECT_TIMEOUT=timeout, PARALLEL=len(nodes))  # type: ignore[no-untyped-call]
        self.state = State(inventory, config)
        self.connected: set[str] = set()
        self.prepared: dict[str, Prepared] = {}
        self.errors: dict[str, NodeFailure] = {}
        self.state.add_callback_handler(_callbacks(self))  # type: ignore[no-untyped-call]

    def _runs_on(self, node: str) -> Callable[[], bool]:
        """pyinfra's `_if` for every operation of `node`: run only when it is executed."""
        return lambda: node in self.executing

    def host(self, node: str) -> Any:
        """The pyinfra Host of `node`."""
        return self.state.inventory.get_host(node)

    def connect(self) -> list[str]:
        """Connect every node; return those that were unreachable (each with its failure,
        found by one strict connection of sparkbase's own: `transport.client.diagnose`)."""
        from pyinfra.api.connect import connect_all
        from pyinfra.api.exceptions import PyinfraError

        from sparkbase.transport.client import diagnose

        with contextlib.suppress(PyinfraError):
            connect_all(self.state)
        down = [n for n in self.nodes if n not in self.connected]
        for node in down:
            found = diagnose(self.targets[node])
            self.errors[node] = found or NodeFailure(
                FailureKind.UNREACHABLE, "SSH connection failed (strict host key checking)"
            )
        return down

    def run(self, node: str, command: str) -> tuple[bool, list[str]]:
        """Run one shell command on `node` outside any operation (under sudo if the inventory says)."""
        from pyinfra.api.command import StringCommand

        target = self.targets[node]
        status, output = self.host(node).run_shell_command(StringCommand(command), _sudo=target.sudo,
                                                           _timeout=target.command_timeout)
        return bool(status), list(output.stdout_lines)

    def lock(self, node: str) -> None:
        """Take the node lock or raise LockHeld; break a stale one (its owner here is gone)."""
        acquire_node_lock(node, lambda command: self.run(node, command)[1], self.owner, self.options.progress)

    def unlock(self, node: str) -> None:
        """Release the node lock if we hold it (best effort)."""
        if node in self.connected:
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
            if isinstance(result, TransportError):  # facts not read safely (`node.FactReadFailed`)
                self.errors[node] = result.failure
            elif isinstance(result, Exception):
                self.errors[node] = NodeFailure(FailureKind.COMMAND, f"{type(result).__name__}: {result}")
            else:
                self.prepared[node] = result

    def _prepare_host(self, node: str) -> Prepared:
        """Read the node once (`node.read_node`, the fact script of its steps' `reads.fact_plan`),
        then add its operations, which all decide on those facts."""
        from sparkbase.deploy.node import boot_state, mok_state, read_node, use_facts
        from sparkbase.deploy.operations.fabric import takeover_diff
        from sparkbase.deploy.pyinfra_deploy import add_steps
        from sparkbase.deploy.reads import fact_plan

        steps = build_steps(self.site, node, self.options.mok, source_mirror(self.options.lab))
        plan = fact_plan(steps)
        facts = read_node(plan)
        use_facts(facts, plan)
        logging.getLogger(__name__).debug("%s: facts read in %d round trip(s), %.2fs; unreadable: %s", node,
                                          facts.round_trips, facts.elapsed_seconds, sorted(facts.errors))
        added = add_steps(steps)
        prepared = Prepared(added, boot_state(facts), mok_state(facts))
        if self.options.diffs:
            for op in added:
                if not op.meta.will_change:
                    continue
                args = op.step.args
                if isinstance(args, File) and not op.step.secret:
                    prepared.diffs[args.path] = _unified(args.path, facts.file_texts[args.path], args.content)
                elif isinstance(args, NetplanTakeover):
                    prepared.diffs[args.path] = takeover_diff(args.path, args.fabric)
        return prepared

    def added_op(self, node: str, op_hash: str) -> AddedOp | None:
        """The step behind pyinfra's operation `op_hash` on `node`, or None when `node` has
        no such operation (pyinfra numbers operations per host, and calls back for every
        active host, with or without it)."""
        try:
            meta = self.state.get_op_data_for_host(self.host(node), op_hash).operation_meta
        except KeyError:
            return None
        prepared = self.prepared.get(node)
        for op in prepared.added if prepared is not None else []:
            if op.meta is meta:
                return op
        return None

    def execute(self, nodes: list[str]) -> None:
        """Run the prepared operations of `nodes` (the others' are skipped by their `_if`),
        first noting on each node what they stage for its next boot (`reboot.stage_command`)."""
        from pyinfra.api.exceptions import PyinfraError
        from pyinfra.api.operations import run_ops

        for node in nodes:
            prepared = self.prepared.get(node)
            names = staged([op.step for op in prepared.added if op.meta.will_change]) if prepared else []
            if names:  # noted before they run: a run that dies after them still leaves the reboot to do
                self.run(node, stage_command(names))
        self.executing = set(nodes)
        try:
            run_ops(self.state)
        except PyinfraError as exc:
            for node in nodes:
                self.errors.setdefault(node, NodeFailure(FailureKind.COMMAND, str(exc)))

    def failed(self, node: str) -> bool:
        """Whether `node` failed to connect, prepare or execute."""
        return node in self.errors

    def result(self, node: str, executed: bool) -> NodeResult:
        """The node's result from this session."""
        name = self.site.inventory.nodes[node].baseline
        baseline = self.site.baselines[name]
        out = NodeResult(node=node, baseline=name, unmanaged=baseline.unmanaged())
        prepared = self.prepared.get(node)
        if prepared is None:
            failure = self.errors.get(node)
            unreachable = failure is not None and failure.kind.connection
            out.status = NodeStatus.UNREACHABLE if unreachable else NodeStatus.FAILED
            out.failure = failure.kind if failure is not None else FailureKind.COMMAND
            out.message = failure.message if failure is not None else ""
            return out
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
            diff: list[str] = []
            if isinstance(op.step.args, Writes) and not op.step.secret:
                diff = prepared.diffs.get(op.step.args.path, [])
            out.operations.append(OpResult(op.step.name, op.step.kind, status, op.reason, diff,
                                           op.step.section))
        signing = signing_key(baseline, self.options.mok)
        out.reboot_reasons = reboot_reasons(baseline, prepared.boot, prepared.mok, will, signing)
        out.running_kernel = prepared.boot["kernel"]
        pending = mok_enrolment(baseline, self.mok_after(prepared, will, signing), signing)
        out.mok_enrolment = pending.to_json() if pending is not None else None
        if self.failed(node):
            failure = self.errors[node]
            out.status = NodeStatus.FAILED
            out.failure = failure.kind
            out.message = failure.message or "an operation failed"
        elif out.reboot_reasons:
            out.status = NodeStatus.REBOOT_PENDING
        elif pending is not None:
            out.status = NodeStatus.MOK_PENDING
        elif out.changes:
            out.status = NodeStatus.CHANGED if executed else NodeStatus.WOULD_CHANGE
        return out

    @staticmethod
    def mok_after(prepared: Prepared, will: list[Step], signing: str | None) -> dict[str, Any]:
        """The MOK state once this run's steps ran: a `mok-import` that will run (or ran)
        leaves the signing key pending."""
        imports = signing is not None and any(isinstance(step.args, MokImport) for step in will)
        if not imports or signing in prepared.mok["pending"]:
            return prepared.mok
        return {**prepared.mok, "pending": [*prepared.mok["pending"], signing]}

    def close(self) -> None:
        """Release node locks and disconnect."""
        for node in self.nodes:
            if node in self.connected:
                with contextlib.suppress(Exception):  # the lock lives in /run; best effort
                    self.unlock(node)
        self.disconnect()

    def disconnect(self) -> None:
        """Disconnect every node (locks are left as they are)."""
        from pyinfra.api.connect import disconnect_all

        disconnect_all(self.state)


def _callbacks(session: Session) -> Any:
    """pyinfra's documented state callbacks (a `BaseStateCallback`) for `session`: which
    hosts connected, which operation starts (progress) and which failed (the node's failure)."""
    from pyinfra.api.state import BaseStateCallback

    class Callbacks(BaseStateCallback):
        @staticmethod
        def host_connect(state: Any, host: Any) -> None:
            session.connected.add(host.name)

        @staticmethod
        def operation_host_start(state: Any, host: Any, op_hash: str) -> None:
            op = session.added_op(host.name, op_hash) if host.name in session.executing else None
            if op is not None and op.meta.will_change:
                session.options.progress(f"{host.name}: {op.step.name}")

        @staticmethod
        def operation_host_error(state: Any, host: Any, op_hash: str, retry_count: int = 0,
                                 max_retries: int = 0) -> None:
            op = session.added_op(host.name, op_hash)
            name = op.step.name if op is not None else op_hash
            session.options.progress(f"{host.name}: {name}: FAILED")
            failed = NodeFailure(FailureKind.COMMAND, f"operation failed: {name}")
            session.errors.setdefault(host.name, failed)

    return Callbacks()


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
            if result.status is NodeStatus.REBOOT_PENDING or (
                    result.status is NodeStatus.MOK_PENDING and result.changes):
                result.status = NodeStatus.WOULD_CHANGE
            report.nodes.append(result)
        rebooting = [r.node for r in report.nodes if r.reboot_reasons and r.node not in session.errors]
        gates = reboot_gates(session, rebooting, runtimes(site, options), options.drain)
        report.notes += plan_notes(gates, runtimes(site, options))
    finally:
        session.disconnect()
    return report


def runtimes(site: Site, options: Options) -> list[LaneRun]:
    """How lanes are found on nodes: the options' own, else from the site's lanes."""
    return options.lanes if options.lanes is not None else lane_runs(site)


def read_serving(session: Session, node: str, runs: list[LaneRun]) -> dict[str, Serving] | str:
    """Whether each lane of `runs` that spans `node` runs there, from the node's processes
    and containers (one probe over the session), or why the node could not say."""
    from sparkbase.facts.runtime import read_runtime

    mine = runs_on(node, runs)
    if not mine:
        return {}
    ok, lines = session.run(node, probe_for(mine))
    if not ok:
        return "the process probe failed"
    try:
        runtime = read_runtime("\n".join(lines), container_names(mine))
    except ValueError as exc:
        return f"the process probe's answer is unreadable: {exc}"
    return serving_on(node, runtime, mine)


def reboot_gates(
    session: Session, nodes: list[str], runtimes: list[LaneRun], drain: bool
) -> dict[str, RebootGate]:
    """For each node that needs a reboot: the lanes it serves now (its processes, asked over
    the session) and whether it may reboot. A node whose processes cannot be read is not
    rebooted."""
    by_lane = {rt.lane: rt for rt in runtimes}
    gates: dict[str, RebootGate] = {}
    for node in nodes:
        found = read_serving(session, node, runtimes)
        if isinstance(found, str):
            gates[node] = RebootGate(node, (), False, (), f"reboot refused: cannot tell which lanes {node} "
                                     f"serves: {found}")
            continue
        gates[node] = decide_reboot(node, list(found.values()), by_lane, drain)
    return gates


def plan_notes(gates: dict[str, RebootGate], runtimes: list[LaneRun]) -> list[str]:
    """What `apply --allow-reboot` would do about lanes, for the plan."""
    notes: list[str] = []
    if gates and not runtimes:
        notes.append(
            "note: no lane has a runtime block (its match strings, unit or container); a reboot cannot tell "
            "whether a lane serves there"
        )
    for node, gate in gates.items():
        if not gate.running:
            if not gate.allowed:
                notes.append(f"note: {node}: apply --allow-reboot would refuse: {gate.message}")
            continue
        if gate.allowed:
            notes.append(f"note: {node}: apply --allow-reboot --drain stops first: "
                         + "; ".join(d.describe() for d in gate.drains))
        else:
            notes.append(f"note: {node}: apply --allow-reboot would refuse: {gate.message}")
    return notes
