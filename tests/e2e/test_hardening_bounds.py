"""Hardening, end to end: one node's hostile tool cannot take the run down.

One factory-fresh lab for the module, `ssh.command_timeout` 8 s. On spark3 the fact read's
`mokutil` (run by the audit's fact script, `sb-state`, and by plan/apply's `MokState`) is
replaced by a program that prints without end, hangs, or prints bytes that are not UTF-8
(`/usr/local/sbin` comes first on the node's PATH). Each time `audit`, `plan` and `apply`
must name spark3 with the reason, within the command deadline, and still report (or
converge) the other nodes, with the sparkbase process's memory bounded — watched from
outside while it runs (VmRSS), and killed past `RSS_LIMIT` (before the fix, `audit` died
of MemoryError and `plan` grew past 2.7 GB; a hung tool hung `plan` and `apply` forever).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fleets import Fleet, fleet_for_module
from ports import port_base

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_HARDENING_BOUNDS_PORT_BASE", 3241)
COMMAND_TIMEOUT = 8
#: the most the sparkbase process may hold (its peak VmRSS); killed past it
RSS_LIMIT_KB = 600 * 1024
#: how long a run may take before the test kills it as hung
RUN_LIMIT = 120.0
TOOL = "/usr/local/sbin/mokutil"
#: where each hostile program records its PID (it is stopped by PID after the test)
PIDS = "/run/sparkbase-test-hostile.pids"
HOSTILE = {
    "flood": f"#!/bin/sh\necho $$ >> {PIDS}\nexec yes sparkbase-hostile-flood\n",
    "hang": f"#!/bin/sh\necho $$ >> {PIDS}\nexec sleep 3600\n",
    "latin1": "#!/bin/sh\nprintf 'SecureBoot disabled\\n\\377\\376 caf\\351\\n'\n",
}
HEALTHY = ("spark1", "spark2", "spark4")


@dataclass
class Run:
    """One finished sparkbase run: its exit status, output, wall time and peak RSS."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    peak_rss_kb: int

    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.stdout)
        return data


def _rss_kb(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.split("\n"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def run_watched(fleet: Fleet, *args: str) -> Run:
    """Run sparkbase, sampling its RSS; kill it (and fail) past RSS_LIMIT_KB or RUN_LIMIT."""
    started = time.monotonic()
    pipe = subprocess.PIPE
    with subprocess.Popen(fleet.argv(*args), stdout=pipe, stderr=pipe, text=True) as proc:
        peak = 0
        try:
            while True:
                try:
                    out, err = proc.communicate(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    peak = max(peak, _rss_kb(proc.pid))
                    if peak > RSS_LIMIT_KB:
                        proc.kill()
                        pytest.fail(f"sparkbase {args[0]} grew past {RSS_LIMIT_KB // 1024} MiB of memory")
                    if time.monotonic() - started > RUN_LIMIT:
                        proc.kill()
                        pytest.fail(f"sparkbase {args[0]} still ran after {RUN_LIMIT:.0f}s (hung)")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return Run(proc.returncode, out, err, time.monotonic() - started, peak)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    for fleet in fleet_for_module(tmp_path_factory, "hardening-bounds", PORT_BASE):
        inventory = fleet.site / "inventory" / "site.yaml"
        text = inventory.read_text()
        assert "ssh:" in text
        inventory.write_text(text.replace("ssh:\n", f"ssh:\n  command_timeout: {COMMAND_TIMEOUT}\n", 1))
        yield fleet


@pytest.fixture(params=sorted(HOSTILE))
def hostile(request: pytest.FixtureRequest, fleet: Fleet) -> Iterator[str]:
    """spark3's mokutil replaced by a hostile program (removed after, with what it left)."""
    fleet.sh("spark3", f"cat > {TOOL} && chmod 755 {TOOL}", input=HOSTILE[request.param])
    yield str(request.param)
    fleet.sh("spark3", f"rm -f {TOOL}; [ ! -e {PIDS} ] || kill $(cat {PIDS}) 2>/dev/null; rm -f {PIDS}; true")


#: what each hostile tool must be reported as, per command (a part of the reason)
AUDIT_REASON = {"flood": "output over", "hang": f"no complete answer within {COMMAND_TIMEOUT}s"}
#: where the audit says it stopped: mokutil --sb-state
AUDIT_SECTION = "(in section 'sb-state')"
DEPLOY_REASON = {"flood": "fact output over", "hang": f"no answer to a fact read within {COMMAND_TIMEOUT}s"}


def _no_traceback(run: Run) -> None:
    assert "Traceback" not in run.stderr and "UnicodeDecodeError" not in run.stderr, run.stderr[-3000:]


def test_audit_names_the_hostile_node_and_reports_the_others(fleet: Fleet, hostile: str) -> None:
    run = run_watched(fleet, "audit", "--format", "json")
    _no_traceback(run)
    nodes = {n["node"]: n for n in run.json()["nodes"]}
    for node in HEALTHY:
        assert nodes[node]["reachable"], nodes[node]
    if hostile == "latin1":
        assert nodes["spark3"]["reachable"], nodes["spark3"]
        return
    assert run.returncode == 3, run.stdout[-2000:] + run.stderr[-2000:]
    spark3 = nodes["spark3"]
    assert not spark3["reachable"] and AUDIT_REASON[hostile] in spark3["reason"], spark3
    assert spark3["reason"].endswith(AUDIT_SECTION), spark3
    assert run.seconds < COMMAND_TIMEOUT + 30, run.seconds


def _judge_deploy(node: dict[str, Any], hostile: str) -> None:
    """The hostile node failed (a hung one: unreachable, as the audit says) for its reason."""
    said = f"{node['status']}: {node['message']}"
    assert node["status"] == ("unreachable" if hostile == "hang" else "failed"), said
    assert DEPLOY_REASON[hostile] in node["message"], said


def _deploy_nodes(run: Run) -> dict[str, dict[str, Any]]:
    _no_traceback(run)
    return {n["node"]: n for n in run.json()["nodes"]}


def test_plan_names_the_hostile_node_and_plans_the_others(fleet: Fleet, hostile: str) -> None:
    run = run_watched(fleet, "plan", "--json")
    nodes = _deploy_nodes(run)
    for node in HEALTHY:
        assert nodes[node]["status"] == "would change", nodes[node]
    if hostile == "latin1":
        assert nodes["spark3"]["status"] == "would change", nodes["spark3"]
        return
    _judge_deploy(nodes["spark3"], hostile)
    assert run.seconds < 2 * COMMAND_TIMEOUT + 60, run.seconds


def test_apply_names_the_hostile_node_and_converges_the_others(fleet: Fleet, hostile: str) -> None:
    run = run_watched(fleet, "apply", "--limit", "spark2", "spark3", "--yes", "--json")
    nodes = _deploy_nodes(run)
    assert nodes["spark2"]["status"] in ("changed", "reboot pending", "unchanged"), nodes["spark2"]
    if hostile == "latin1":
        assert nodes["spark3"]["status"] in ("changed", "reboot pending", "unchanged"), nodes["spark3"]
        return
    _judge_deploy(nodes["spark3"], hostile)
    assert run.returncode != 0
