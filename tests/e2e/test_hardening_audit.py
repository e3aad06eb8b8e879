"""Hardening, end to end: a node that drops or freezes in the middle of an audit.

One factory-fresh lab (port base 2811) for the module. spark3's `nvidia-smi` is slowed by a
wrapper that marks when the audit's fact script reaches it, so the fault lands while the
audit's connection is open and the script is half done — deterministically:
- `unreachable` then (every process of the node ends, its sshd too): the connection drops;
- every process of the node frozen (SIGSTOP, a machine that stops answering): the audit
  gives up at the inventory's `ssh.command_timeout`, never waits forever;
- `hang` before the audit (sshd frozen): connections time out at `connect_timeout`.
Each time: the other nodes are reported in full, the dead one is named, exit status 3.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleets import Fleet, fleet_for_module
from ports import port_base

from sparkbase_lab import faults

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_HARDENING_AUDIT_PORT_BASE", 2811)
COMMAND_TIMEOUT = 4
MARK = "/run/sparkbase-test-facts-started"
SLOW_SMI = f"""#!/bin/sh
: > {MARK}
sleep 30
exec /usr/local/bin/nvidia-smi "$@"
"""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    for fleet in fleet_for_module(tmp_path_factory, "hardening-audit", PORT_BASE):
        inventory = fleet.site / "inventory" / "site.yaml"
        text = inventory.read_text()
        assert "ssh:" in text
        inventory.write_text(text.replace("ssh:\n", f"ssh:\n  command_timeout: {COMMAND_TIMEOUT}\n", 1))
        yield fleet


@pytest.fixture
def slow_spark3(fleet: Fleet) -> Iterator[None]:
    """spark3's nvidia-smi marks that the fact script reached it, then takes 30 s."""
    wrapper = "/usr/local/sbin/nvidia-smi"
    fleet.sh("spark3", f"rm -f {MARK}; cat > {wrapper} && chmod 755 {wrapper}", input=SLOW_SMI)
    yield
    faults.clear_all(fleet.lab, "spark3")
    fleet.wait_ssh("spark3")
    fleet.sh("spark3", f"rm -f /usr/local/sbin/nvidia-smi {MARK}")


def _start_audit(fleet: Fleet) -> subprocess.Popen[str]:
    return fleet.popen("audit", "--format", "json")


def _wait_mark(fleet: Fleet, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if fleet.lab.run("spark3", f"test -e {MARK}")[0] == 0:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    pytest.fail("the audit's fact script never reached spark3's nvidia-smi")


def _node_processes(fleet: Fleet, node: str) -> list[int]:
    """Host PIDs of every process of `node` except its init."""
    init = fleet.lab.node_pid(node)
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = list(children.get(init, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _judge(out: str, dead: str, reason: str) -> None:
    data: dict[str, Any] = json.loads(out)
    assert data["status"] == "unreachable"
    nodes = {n["node"]: n for n in data["nodes"]}
    assert not nodes[dead]["reachable"] and reason in nodes[dead]["reason"], nodes[dead]
    for node in ("spark1", "spark2", "spark4"):
        assert nodes[node]["reachable"], nodes[node]
        ids = {c["id"]: c["status"] for c in nodes[node]["checks"]}
        assert ids["kernel.release"] == "fail" and ids["gpu.clock"] == "pass"


def test_a_node_that_drops_mid_audit_is_named_and_the_others_reported(
    fleet: Fleet, slow_spark3: None
) -> None:
    proc = _start_audit(fleet)
    try:
        _wait_mark(fleet, proc)
        started = time.monotonic()
        faults.inject(fleet.lab, "spark3", "unreachable")
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - started < COMMAND_TIMEOUT + 3
    assert proc.returncode == 3, out + err
    _judge(out, "spark3", "fact script failed")
    text = fleet.sparkbase("audit")
    assert text.returncode == 3
    assert "spark3" in text.stdout and "unreachable" in text.stdout


def test_a_node_that_freezes_mid_audit_times_out_at_the_command_timeout(
    fleet: Fleet, slow_spark3: None
) -> None:
    proc = _start_audit(fleet)
    frozen: list[int] = []
    try:
        _wait_mark(fleet, proc)
        started = time.monotonic()
        candidates = _node_processes(fleet, "spark3")
        for pid in candidates:
            # a short-lived command may end between listing and freezing: nothing to freeze
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                frozen.append(pid)
        assert frozen, "spark3 has no processes to freeze"
        out, err = proc.communicate(timeout=COMMAND_TIMEOUT + 30)
        took = time.monotonic() - started
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, out + err
    assert took < COMMAND_TIMEOUT + 5, took
    _judge(out, "spark3", f"no complete answer within {COMMAND_TIMEOUT}s")


def test_a_hung_sshd_before_the_audit_times_out_at_connect(fleet: Fleet) -> None:
    faults.inject(fleet.lab, "spark3", "hang")
    try:
        started = time.monotonic()
        done = fleet.sparkbase("audit", "--format", "json", timeout=60)
        took = time.monotonic() - started
    finally:
        faults.clear(fleet.lab, "spark3", "hang")
    assert done.returncode == 3, done.stdout + done.stderr
    assert took < 20, took
    _judge(done.stdout, "spark3", "timed out")
