"""Reboots respect lanes: whether a lane serves on a node, decided from the node's processes
and containers (never a unit name), and the pure decision (refuse, or drain the lane the way
it runs on all its nodes) as data; the probe a drain runs, against real processes.

`drain_cases/*.json`: one case per file: the node, `--drain`, the lanes (`LaneRun`), the
node's processes (pid, ppid, argv, /proc/PID/cgroup) and containers (name, running); out:
the processes of each lane found serving there, whether the reboot is allowed, the lanes
it serves, words of the message, and the commands each drained lane is stopped with.
"""

from __future__ import annotations

import json
import secrets
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sparkbase.deploy.drain import (
    LaneRun,
    Serving,
    decide_reboot,
    describe_leftovers,
    lane_runs,
    leftovers,
    probe_for,
    serving_on,
    stop_commands,
)
from sparkbase.facts.parsers.docker import parse_container_inspect
from sparkbase.facts.parsers.runtime import parse_cgroup
from sparkbase.facts.runtime import RuntimeFacts, ServingProcess, read_runtime
from sparkbase.model.site import load_site

REPO = Path(__file__).parents[2]
CASES = sorted((Path(__file__).parent / "drain_cases").glob("*.json"))
MONGO = next((REPO / "tests" / "fixtures" / "real").glob("docker_inspect__mongo_running_*")).read_text()


def _runtime(case: dict[str, Any]) -> RuntimeFacts:
    """The node of a case as the runtime probe reads it."""
    processes = tuple(ServingProcess(pid, tuple(argv), None, None, parse_cgroup(cgroup), (), {}, None, None,
                                     ppid=ppid) for pid, ppid, argv, cgroup in case["processes"])
    (sample,) = parse_container_inspect(MONGO)
    containers = {f"{i:064x}": replace(sample, id=f"{i:064x}", name=c["name"], running=c["running"])
                  for i, c in enumerate(case["containers"])}
    return RuntimeFacts(processes, containers, {})


def _runs(case: dict[str, Any]) -> list[LaneRun]:
    return [LaneRun(r["lane"], tuple(r["nodes"]), tuple(r["match"]), r["unit"], r["container"])
            for r in case["lanes"]]


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_drain_case(path: Path) -> None:
    case = json.loads(path.read_text())
    expect = case["expect"]
    runs = _runs(case)
    found = serving_on(case["node"], _runtime(case), runs)
    assert {lane: list(s.pids) for lane, s in found.items()} == expect["serving"]
    gate = decide_reboot(case["node"], list(found.values()), {r.lane: r for r in runs}, case["drain"])
    assert (gate.allowed, list(gate.running)) == (expect["allowed"], expect["running"]), gate.message
    for words in expect["message"]:
        assert words in gate.message, gate.message
    assert {d.lane: stop_commands(d.run) for d in gate.drains} == expect["drains"]
    for drain in gate.drains:  # the whole lane goes down, not only the rebooting node
        assert drain.nodes == next(r.nodes for r in runs if r.lane == drain.lane)


def test_every_case_is_about_something() -> None:
    assert len(CASES) >= 8
    assert all(json.loads(p.read_text())["about"] for p in CASES)


def test_what_is_left_after_a_stop_is_named_by_pid() -> None:
    case = json.loads(next(p for p in CASES if p.stem == "container-lane-serves-drained").read_text())
    runs = _runs(case)
    gate = decide_reboot("spark3", list(serving_on("spark3", _runtime(case), runs).values()),
                         {r.lane: r for r in runs}, drain=True)
    left = leftovers("spark2", _runtime(case), gate.drains)
    assert describe_leftovers("spark2", left) == "spark2: lane dsv41-flash still runs (pid 101)"
    gone = replace(_runtime(case), processes=(), containers={})
    assert leftovers("spark2", gone, gate.drains) == {}


def test_stop_commands_are_quoted_words() -> None:
    odd = LaneRun("x", ("spark1",), ("m",), "odd name;rm -rf /.service", "c")
    assert stop_commands(odd) == ["systemctl stop 'odd name;rm -rf /.service'", "docker stop c"]
    assert Serving("x").serving is False and Serving("x", container_running=True).serving is True


def test_shipped_lanes_run_by_their_runtime() -> None:
    """Every lane with a runtime block is found by its match strings over all its nodes, and
    stopped by its unit (the shipped lanes name units)."""
    site = load_site(REPO)
    found = {run.lane: run for run in lane_runs(site)}
    assert set(found) == {name for name, lane in site.lanes.items() if lane.runtime is not None}
    for name, run in found.items():
        lane = site.lanes[name]
        assert lane.runtime is not None
        assert run.nodes == tuple(lane.nodes) and run.match == tuple(lane.runtime.match)
        assert run.stoppable


def test_a_container_lane_is_stopped_as_a_container() -> None:
    site = load_site(REPO)
    lane = site.lanes["dsv41-flash"]
    assert lane.runtime is not None
    image = "aidendle94/sparkrun-sglang-dsv41-gb10@sha256:" + "f617afd8" * 8
    given = lane.runtime.model_dump(exclude_none=True)
    runtime = lane.runtime.model_validate({**given, "container": {"name": "dsv41-flash", "image": image}})
    patched = replace(site, lanes={"dsv41-flash": lane.model_copy(update={"runtime": runtime})})
    (run,) = lane_runs(patched)
    assert (run.unit, run.container) == ("lane-dsv41-flash.service", "dsv41-flash")
    assert stop_commands(run) == ["systemctl stop lane-dsv41-flash.service", "docker stop dsv41-flash"]


def test_the_drain_probe_finds_a_live_process_and_its_worker(tmp_path: Path) -> None:
    """`probe_for` run by sh against real processes (a server holding the match strings and
    its worker, which does not): both found, with no NCCL detail read; nothing is found
    once they have ended."""
    marker = f"sparkbase-drain-test-{secrets.token_hex(6)}"
    worker = ("import subprocess, sys, time\n"
              "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              "print(w.pid, flush=True)\ntime.sleep(60)\n")
    server = subprocess.Popen([sys.executable, "-c", worker, marker, "--tp", "4"], stdout=subprocess.PIPE,
                              text=True)
    run = LaneRun("x", ("spark1",), (marker, "--tp"), unit="x.service")
    script = shlex.join(["sh", "-c", probe_for([run])])
    try:
        assert server.stdout is not None
        worker_pid = int(server.stdout.readline())
        answer = subprocess.run(["sh", "-c", f"{script}; true"], capture_output=True, text=True, timeout=30,
                                check=True)
    finally:
        server.kill()
        server.wait()
    runtime = read_runtime(answer.stdout)
    assert all(p.environ is None and not p.libraries for p in runtime.processes)  # no detail read
    found = serving_on("spark1", runtime, [run])["x"]
    assert found.pids == tuple(sorted((server.pid, worker_pid)))
    subprocess.run(["kill", str(worker_pid)], check=False)
    after = subprocess.run(["sh", "-c", f"{script}; true"], capture_output=True, text=True, timeout=30,
                           check=True)
    assert server.pid not in serving_on("spark1", read_runtime(after.stdout), [run])["x"].pids
