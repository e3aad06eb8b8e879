"""apply: converge nodes in parallel, and roll out reboots one node at a time.

With `allow_reboot`, nodes whose changes need a reboot are converged one at a time:
stage, reboot, wait for SSH (sparkbase's strict client, `transport.client.wait_for`),
verify (kernel, page size, command line, modules), then apply once more for the post-boot
steps; the rollout stops at the first node that fails and the nodes after it are not
touched. Lanes a rebooting node serves are refused, or drained first with `drain`.
"""

from __future__ import annotations

import shlex
import time
import uuid

from sparkbase.deploy.areas.dkms import signing_key
from sparkbase.deploy.drain import Drain, RebootGate, describe_leftovers, stop_commands
from sparkbase.deploy.locks import LockHeld, Owner, local_lock_dir, local_locks
from sparkbase.deploy.reboot import boot_mismatches, module_mismatches
from sparkbase.deploy.results import NodeResult, NodeStatus, Report
from sparkbase.deploy.session import Options, Session, patch_gevent, read_serving, reboot_gates, runtimes
from sparkbase.model.site import Site
from sparkbase.transport import FailureKind, SshTarget, TransportError, ssh_targets

REBOOT_MARKER = "/run/sparkbase/reboot-pending-marker"
#: seconds between two looks at a drained lane's processes
DRAIN_POLL_SECONDS = 1.0


def apply(site: Site, nodes: list[str], options: Options) -> Report:
    """Converge `nodes`; stage or (with allow_reboot) roll out reboots one node at a time."""
    patch_gevent()
    owner = Owner()
    report = Report("apply")
    try:
        with local_locks(local_lock_dir(site.root), nodes, owner):
            _apply_locked(site, nodes, options, owner, report)
    except LockHeld as exc:
        report.notes.append(str(exc))
        for node in nodes:
            report.nodes.append(NodeResult(node, site.inventory.nodes[node].baseline,
                                           NodeStatus.LOCKED, message=str(exc)))
    for result in report.nodes:  # whatever became of it, what it leaves as found
        result.unmanaged = site.baselines[result.baseline].unmanaged()
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
            gates = reboot_gates(session, needs_reboot, runtimes(site, options), options.drain)
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
        results[node] = rollout_one(site, node, options, owner)
        # a MOK enrolment waiting at one node's console does not stop the others
        if results[node].status not in (NodeStatus.CHANGED, NodeStatus.UNCHANGED, NodeStatus.MOK_PENDING):
            failed_at = node
            progress(f"{node}: rollout stopped ({results[node].message}); nodes after it are untouched")
    report.nodes = [results[n] for n in nodes]


def _drain(site: Site, drains: list[Drain], options: Options, owner: Owner) -> str | None:
    """Stop each lane the way it runs on every node it spans (`drain.stop_commands`), then
    wait (at most `options.drain_timeout`) until no process of it is left there; what went
    wrong, or None. Touches only the lanes' units and containers."""
    nodes = list(dict.fromkeys(node for d in drains for node in d.nodes))
    session = Session(site, nodes, options, owner)
    try:
        down = session.connect()
        if down:
            return f"cannot reach {', '.join(down)} to stop its lanes"
        for lane in drains:
            where = ", ".join(lane.nodes)
            options.progress(f"draining lane {lane.lane}: stopping {lane.run.how()} on {where}")
            for node in lane.nodes:
                for command in stop_commands(lane.run):
                    stopped, _ = session.run(node, command)
                    if not stopped:  # the processes decide: a container already gone is stopped
                        options.progress(f"{node}: {command} failed; checking the lane's processes")
        return _wait_drained(session, drains, options)
    finally:
        session.disconnect()


def _wait_drained(session: Session, drains: list[Drain], options: Options) -> str | None:
    """Ask every drained node for the lanes' processes until none is left (None), or say
    which are left when `options.drain_timeout` has passed."""
    runs = [d.run for d in drains]
    nodes = list(dict.fromkeys(node for d in drains for node in d.nodes))
    deadline = time.monotonic() + options.drain_timeout
    while True:
        left: list[str] = []
        for node in nodes:
            found = read_serving(session, node, runs)
            if isinstance(found, str):
                left.append(f"{node}: {found}")
                continue
            still = {lane: s for lane, s in found.items() if s.serving}
            if still:
                left.append(describe_leftovers(node, still))
        if not left:
            return None
        if time.monotonic() >= deadline:
            return f"{'; '.join(left)} {options.drain_timeout:.0f} s after it was stopped"
        time.sleep(DRAIN_POLL_SECONDS)


def rollout_one(site: Site, node: str, options: Options, owner: Owner) -> NodeResult:
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
        stage.disconnect()
    target = ssh_targets(site, options.lab)[node]
    try:
        back = wait_rebooted(target, options.reboot_timeout)
    except TransportError as exc:
        return NodeResult(node, staged.baseline, NodeStatus.UNREACHABLE, staged.operations, reasons, True,
                          message=f"refused after reboot: {exc.failure.message}", failure=exc.failure.kind)
    if not back:
        return NodeResult(node, staged.baseline, NodeStatus.FAILED, staged.operations, reasons, True,
                          message=f"did not come back over SSH within {options.reboot_timeout:.0f}s",
                          failure=FailureKind.TIMEOUT)
    finish = Session(site, [node], options, owner)
    try:
        if finish.connect():
            failure = finish.errors[node]
            return NodeResult(node, staged.baseline, NodeStatus.UNREACHABLE, staged.operations, reasons,
                              True, message="unreachable after reboot", failure=failure.kind)
        finish.lock(node)
        finish.prepare([node])
        prepared = finish.prepared.get(node)
        if prepared is None:
            return finish.result(node, executed=False)
        baseline = site.baselines[site.inventory.nodes[node].baseline]
        problems = boot_mismatches(baseline, prepared.boot) + module_mismatches(
            baseline, prepared.boot, prepared.mok, signing_key(baseline, options.mok)
        )
        kernel = prepared.boot["kernel"]
        if problems:
            return NodeResult(node, staged.baseline, NodeStatus.FAILED, staged.operations, problems, True,
                              kernel, message=f"verification failed after reboot, running {kernel}: "
                              + "; ".join(problems))
        progress(f"{node}: back on {kernel} ({prepared.boot['page_size']}-byte pages), verified")
        post = finish.result(node, executed=False)
        if post.mok_enrolment is not None:
            progress(f"{node}: MOK enrolment pending: the signed modules load once a person at the console "
                     "enrols the key")
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


def wait_rebooted(target: SshTarget, timeout: float) -> bool:
    """Wait until the node answers SSH again and its /run marker is gone (it rebooted):
    strict probes over sparkbase's own client, each with a short deadline. A refused host
    key stops the wait at once (`TransportError`, kind HOST_KEY)."""
    from sparkbase.transport.client import wait_for

    return wait_for(target, f"test ! -e {shlex.quote(REBOOT_MARKER)}", timeout)
