"""Lane safety on the emulated fleet: trigger 2 from an engine's real metrics (quiet, fired,
unknown), the clock latch judged from one nvidia-smi reading (idle, busy, latched), and
reboots that respect a running lane, found by its processes (an active unit with no engine
serves nothing; the lab's serving stand-in refused, then drained).

One factory-fresh lab for the module (port base 2891 + SPARKBASE_TEST_PORT_OFFSET) with a
private copy of the shipped site. The metrics come from a small HTTP server on 127.0.0.1
that answers as SGLang's /metrics does. The drain tests own spark1 (rebooted) and the
production lane's stand-in on every node.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fleets import FACTORY_KERNEL, NODES, SITE_KERNEL, Fleet, fleet_for_module
from ports import port_base

from sparkbase_lab import faults

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_LANE_SAFETY_PORT_BASE", 2891)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    yield from fleet_for_module(tmp_path_factory, "lane-safety", PORT_BASE)


# --- trigger 2 -----------------------------------------------------------------------------


def _sglang_scrape(running: int, used_tokens: int) -> bytes:
    labels = 'engine_type="unified",model_name="deepseek-v4.1-flash",pp_rank="0",tp_rank="0"'
    return (
        "# HELP sglang:num_running_reqs The number of running requests.\n"
        "# TYPE sglang:num_running_reqs gauge\n"
        f"sglang:num_running_reqs{{{labels}}} {float(running)}\n"
        "# HELP sglang:num_used_tokens The number of used tokens.\n"
        "# TYPE sglang:num_used_tokens gauge\n"
        f"sglang:num_used_tokens{{{labels}}} {float(used_tokens)}\n"
    ).encode()


@pytest.fixture(scope="module")
def engine() -> Iterator[tuple[str, dict[str, bytes]]]:
    """An SGLang-shaped /metrics on 127.0.0.1; the test sets what it answers."""
    answer = {"body": _sglang_scrape(1, 10_000)}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.end_headers()
            self.wfile.write(answer["body"])

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics", answer
    server.shutdown()
    server.server_close()


def test_trigger_2_snapshot_unknown_blind(fleet: Fleet, engine: tuple[str, dict[str, bytes]]) -> None:
    url, answer = engine
    answer["body"] = _sglang_scrape(5, 1_100_000)  # two 500K-class sessions among five requests
    calm = fleet.sparkbase("triggers", "--metrics", url, "--json")  # one scrape: a snapshot
    assert calm.returncode == 4, calm.stdout + calm.stderr
    session = next(t for t in json.loads(calm.stdout)["triggers"] if t["kind"] == "session-load")
    assert session["status"] == "unknown" and "peak concurrency 2" in session["evidence"][1]
    assert session["evidence"][0].startswith("snapshot, not sustained: 1 sample time in the 60-minute window "
                                             "(none with")
    kernel = next(t for t in json.loads(calm.stdout)["triggers"] if t["kind"] == "kernel-pin")
    assert f"spark1: running {FACTORY_KERNEL}, page size 4096" in kernel["evidence"]

    answer["body"] = _sglang_scrape(6, 2_150_000)  # four of them, in one scrape: still a snapshot
    busy = fleet.sparkbase("triggers", "--metrics", url)
    assert busy.returncode == 4, busy.stdout + busy.stderr
    assert "UNKNOWN long-context-concurrency" in busy.stdout and "peak concurrency 4" in busy.stdout
    assert "snapshot, not sustained: 1 sample time in the 60-minute window (one with" in busy.stdout

    unknown = fleet.sparkbase("triggers")
    assert unknown.returncode == 4, unknown.stdout + unknown.stderr
    assert "UNKNOWN long-context-concurrency" in unknown.stdout

    answer["body"] = b"# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.5\n"
    blind = fleet.sparkbase("triggers", "--metrics", url)
    assert blind.returncode == 4 and "no sglang:num_running_reqs" in blind.stdout


def test_trigger_2_from_the_lab_lanes_own_metrics(fleet: Fleet) -> None:
    """The lab's serving stand-in (rank 0, spark1) exports SGLang's gauges: idle holds no long
    session, fault lane-sessions four; one scrape of either is a snapshot (exit 4)."""
    from sparkbase.model.site import load_site
    from sparkbase_lab import lanes

    site = load_site(fleet.site)
    lanes.start(fleet.lab, site, "dsv41-flash")
    try:
        url = f"http://127.0.0.1:{lanes.metrics_port(fleet.lab, 'spark1')}/metrics"
        idle = fleet.sparkbase("triggers", "--metrics", url)
        assert idle.returncode == 4 and "peak concurrency 0" in idle.stdout, idle.stdout + idle.stderr
        assert "snapshot, not sustained" in idle.stdout
        faults.inject(fleet.lab, "spark1", "lane-sessions")
        busy = fleet.sparkbase("triggers", "--metrics", url)
        assert busy.returncode == 4 and "peak concurrency 4" in busy.stdout, busy.stdout + busy.stderr
        assert "snapshot, not sustained: 1 sample time in the 60-minute window (one with" in busy.stdout
    finally:
        faults.clear(fleet.lab, "spark1", "lane-sessions")
        lanes.stop(fleet.lab, site, "dsv41-flash")


# --- the clock latch -------------------------------------------------------------------------


def _gpu_check(fleet: Fleet, node: str) -> dict[str, Any]:
    done = fleet.sparkbase("audit", "--format", "json", "--limit", node)
    data = json.loads(done.stdout)
    checks = next(n for n in data["nodes"] if n["node"] == node)["checks"]
    check: dict[str, Any] = next(c for c in checks if c["id"] == "gpu.clock")
    return check


def test_idle_busy_and_latched_gpu(fleet: Fleet) -> None:
    node = "spark3"
    idle = _gpu_check(fleet, node)
    assert idle["status"] == "pass", idle
    assert idle["observed"] == "562 MHz, 4.05 W, 0 % busy, reasons: GPU idle (idle: not a latch)"
    faults.inject(fleet.lab, node, "gpu-busy")
    try:
        busy = _gpu_check(fleet, node)
        assert busy["status"] == "pass" and busy["observed"].startswith("2418 MHz, 35.21 W, 97 % busy"), busy
    finally:
        faults.clear(fleet.lab, node, "gpu-busy")
    faults.inject(fleet.lab, node, "gpu-latch")
    try:
        latched = _gpu_check(fleet, node)
        assert latched["status"] == "fail", latched
        assert latched["observed"] == "611 MHz, 10.12 W, 98 % busy, no clock-event reason (clock latch)"
        assert latched["fix"] == "full AC disconnect (unplug power), then re-run"
    finally:
        faults.clear(fleet.lab, node, "gpu-latch")


# --- reboots respect lanes ---------------------------------------------------------------------

#: runs the runner in its own process (pyinfra patches the process with gevent), the lanes
#: taken from the site (how each is found: its match strings; how it is stopped: its unit),
#: and prints the report as JSON
RUNNER = """
import json, sys
from pathlib import Path
from sparkbase.deploy.runner import Options, apply, plan
from sparkbase.model.site import load_site
site_dir, lab_dir, command, drain = sys.argv[1:5]
options = Options(lab=Path(lab_dir), allow_reboot=command == "apply", drain=drain == "drain",
                  reboot_timeout=120)
run = apply if command == "apply" else plan
print(json.dumps(run(load_site(Path(site_dir)), ["spark1"], options).to_json()))
"""
#: the production lane (lanes/dsv41-flash.yaml): its unit, and its server's match strings
LANE = "dsv41-flash"
UNIT = "lane-dsv41-flash.service"
#: the server's match string (sglang.launch_server) as a pattern its own grep's command line does not match
SERVER_PATTERN = "sglang[.]launch_server"


def _run(fleet: Fleet, command: str, drain: bool) -> tuple[dict[str, Any], str]:
    argv = [sys.executable, "-c", RUNNER, str(fleet.site), str(fleet.lab.dir), command,
            "drain" if drain else "no"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report, done.stderr


def _serving(fleet: Fleet, node: str) -> list[int]:
    """The PIDs of the lane's server on `node` (what /proc shows, not what a unit says)."""
    out = fleet.lab.run(node, f"grep -ls '{SERVER_PATTERN}' /proc/[0-9]*/cmdline")[1]
    return sorted(int(line.split("/")[2]) for line in out.split() if line.split("/")[2].isdigit())


def test_an_active_unit_with_no_engine_serves_nothing(fleet: Fleet) -> None:
    """The lane's unit is active on spark1 but runs no engine (ExecStart=/bin/true): a unit
    name alone never says a lane serves, so the plan refuses no reboot there."""
    unit = "[Unit]\nDescription=not an engine\n[Service]\nExecStart=/bin/true\n"
    fleet.sh("spark1", f"cat > /etc/systemd/system/{UNIT} && systemctl start {UNIT}", input=unit)
    try:
        assert fleet.lab.run("spark1", f"systemctl is-active {UNIT}")[0] == 0
        report, _ = _run(fleet, "plan", drain=False)
        assert not any("would refuse" in note for note in report["notes"]), report["notes"]
    finally:
        fleet.sh("spark1", f"systemctl stop {UNIT}; rm -f /etc/systemd/system/{UNIT}")


@pytest.fixture(scope="module")
def serving(fleet: Fleet) -> Fleet:
    """The lane's serving stand-in started on every node (its engine's command line, its
    workers): the lane serves everywhere."""
    from sparkbase.model.site import load_site
    from sparkbase_lab import lanes

    lanes.start(fleet.lab, load_site(fleet.site), LANE)
    for node in NODES:
        assert _serving(fleet, node), node
    return fleet


def test_plan_shows_the_refusal_and_the_drain(serving: Fleet) -> None:
    report, _ = _run(serving, "plan", drain=False)
    pids = _serving(serving, "spark1")
    refusal = next(note for note in report["notes"] if "would refuse" in note)
    assert refusal.startswith("note: spark1: apply --allow-reboot would refuse: reboot refused: "
                              f"spark1 serves {LANE} (pid "), refusal
    assert all(f"pid {pid}" in refusal for pid in pids), (pids, refusal)
    drained, _ = _run(serving, "plan", drain=True)
    assert any(
        f"stops first: lane {LANE} (unit {UNIT}) goes down on all 4 of its nodes" in note
        for note in drained["notes"]
    ), drained["notes"]
    assert all(_serving(serving, node) for node in NODES)  # a plan changes nothing


def test_a_reboot_onto_a_serving_node_is_refused(serving: Fleet) -> None:
    report, progress = _run(serving, "apply", drain=False)
    spark1 = report["nodes"][0]
    assert spark1["status"] == "reboot pending" and not spark1["rebooted"], spark1
    assert f"reboot refused: spark1 serves {LANE}" in spark1["message"] and "--drain" in spark1["message"]
    assert "reboot refused" in progress
    assert serving.sh("spark1", "uname -r").strip() == FACTORY_KERNEL  # staged, not rebooted
    assert all(_serving(serving, node) for node in NODES)  # the lane still serves everywhere


def test_a_drained_reboot_stops_the_lane_everywhere_first(serving: Fleet) -> None:
    report, progress = _run(serving, "apply", drain=True)
    spark1 = report["nodes"][0]
    assert spark1["status"] == "changed" and spark1["rebooted"], spark1
    assert f"draining lane {LANE}: stopping unit {UNIT} on spark1, spark2, spark3, spark4" in progress
    assert progress.index("draining lane") < progress.index("spark1: rebooting")
    assert any(
        note.startswith(f"drained: lane {LANE} (unit {UNIT}) goes down on all 4 of its nodes")
        for note in report["notes"]
    ), report["notes"]
    assert not any(_serving(serving, node) for node in NODES)  # the whole TP4 lane is down
    assert serving.sh("spark1", "uname -r").strip() == SITE_KERNEL


def test_the_cli_takes_drain(fleet: Fleet) -> None:
    """--drain is an apply and plan option (documented in docs/cli.md)."""
    for command in ("apply", "plan"):
        done = subprocess.run([sys.executable, "-m", "sparkbase.cli.main", command, "--help"],
                              capture_output=True, text=True, check=False)
        assert "--drain" in done.stdout
