"""The lane runtime on the emulated fleet: this module's own lab (ports 2901…), a clone of
the run's converged image (`sparkbase apply --allow-reboot --yes`, see fleets.py), the
production lane's stand-in (a server and its workers) started on every node; then each
runtime finding (one fault, one node), a wrong setting only in the workers, an nccl.conf
setting a key twice, a process hiding behind the probe's old exclusion text, a lane not
serving on a node, a lane switch and a refused switch (the .env untouched), and
`lane status`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleets import NODES, ConvergedImage, clone_fleet
from ports import port_base

from sparkbase.cli.main import main
from sparkbase.model.site import load_site
from sparkbase_lab import faults, lanes
from sparkbase_lab.fleet import Lab

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_LANE_RUNTIME_PORT_BASE", 2901)
LANE = "dsv41-flash"


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, converged_image: ConvergedImage,
            site_copy: Path) -> Iterator[Lab]:
    """A converged fleet (a clone of the run's image) running the production lane's stand-in
    on every node."""
    for fleet in clone_fleet(converged_image, tmp_path_factory.mktemp("lane-lab"), PORT_BASE):
        lanes.start(fleet, load_site(site_copy), LANE)
        yield fleet


def preflight(site: Path, lab: Lab, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(["preflight", LANE, "--site", str(site), "--lab-dir", str(lab.dir), "--json"])
    data = json.loads(capsys.readouterr().out)
    return code, [f"{r['where']}: {r['reason']}" for r in data["refusals"]]


def stand_in(lab: Lab, site: Path, node: str) -> tuple[int, list[int]]:
    """The PIDs of the lane's stand-in on `node`: its server and its workers (the lab's record)."""
    unit = lanes.unit_name(load_site(site), LANE)
    status, out, err = lab.run(node, f"cat /run/sparkbase-lab/serving/{unit}.json", timeout=30)
    assert status == 0, err
    data = json.loads(out)
    return int(data["pid"]), [int(pid) for pid in data["workers"]]


def test_a_conforming_lane_passes_its_runtime_checks(running: Lab, site_copy: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, refusals = preflight(site_copy, running, capsys)
    assert (code, refusals) == (0, [])
    main(["audit", "--site", str(site_copy), "--lab-dir", str(running.dir), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    passed = {(n["node"], c["id"]): c for n in data["nodes"] for c in n["checks"]
              if c["id"].startswith("runtime.") and c["status"] == "pass"}
    for node in ("spark1", "spark2", "spark3", "spark4"):
        for kind in ("running", "nccl_env", "nccl_library", "affinity", "cgroup"):
            assert (node, f"runtime.{kind}.{LANE}") in passed
        server, workers = stand_in(running, site_copy, node)
        assert len(workers) == 2
        judged = passed[(node, f"runtime.nccl_env.{LANE}")]["observed"]
        assert all(f"pid {pid}" in judged for pid in (server, *workers)), judged  # the workers too
        found = passed[(node, f"runtime.running.{LANE}")]["observed"]
        assert f"pid {server} (command line), 2 more in its cgroup or below it" in found
        assert "lane-dsv41-flash.service" in found


FINDINGS = [  # fault on one node -> the runtime check that names it, and what it says
    ("spark2", "lane-env", "runtime.nccl_env",
     "NCCL_IB_MERGE_NICS=1 (environment), expected NCCL_IB_MERGE_NICS=0"),
    ("spark3", "lane-private-nccl", "runtime.nccl_library",
     "maps /opt/lane-image/lib/libnccl.so.2, not the pinned"),
    ("spark4", "lane-outside-slice", "runtime.affinity", "Cpus_allowed_list 0-"),
    ("spark4", "lane-outside-slice", "runtime.cgroup", "is outside sparkbase-serving.slice"),
    # ~/.nccl.conf-style file with MERGE_NICS=1 then =0: NCCL takes 1 (a last-wins reading: 0)
    ("spark3", "lane-conf-twice", "runtime.nccl_env",
     "NCCL_IB_MERGE_NICS=1 ($NCCL_CONF_FILE), expected NCCL_IB_MERGE_NICS=0"),
    ("spark3", "lane-conf-twice", "runtime.nccl_env",
     "$NCCL_CONF_FILE sets NCCL_IB_MERGE_NICS twice with different values (line 1: '1', line 2: '0'); "
     "NCCL uses the first, '1'"),
]


@pytest.mark.parametrize(("node", "fault", "check", "text"), FINDINGS)
def test_each_runtime_finding_names_node_and_pid(running: Lab, site_copy: Path,
                                                 capsys: pytest.CaptureFixture[str],
                                                 node: str, fault: str, check: str, text: str) -> None:
    site = load_site(site_copy)
    faults.inject(running, node, fault)
    lanes.restart(running, site, LANE, node)
    try:
        code, refusals = preflight(site_copy, running, capsys)
        assert code == 1
        hits = [r for r in refusals if r.startswith(f"{node}: {check}.{LANE}:") and text in r]
        assert hits, refusals
        assert " pid " in hits[0]
        assert not [r for r in refusals if not r.startswith(f"{node}: runtime.")], refusals
    finally:
        faults.clear(running, node, fault)
        lanes.restart(running, site, LANE, node)


def test_a_wrong_setting_only_in_the_workers_is_refused_naming_them(
        running: Lab, site_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The server sets NCCL_IB_MERGE_NICS=1 in itself after start (its /proc/PID/environ does
    not show it) and its workers inherit it: the workers, which map libnccl and whose
    command lines do not hold the lane's match strings, are judged and named."""
    site = load_site(site_copy)
    faults.inject(running, "spark2", "lane-worker-env")
    lanes.restart(running, site, LANE, "spark2")
    try:
        server, workers = stand_in(running, site_copy, "spark2")
        code, refusals = preflight(site_copy, running, capsys)
    finally:
        faults.clear(running, "spark2", "lane-worker-env")
        lanes.restart(running, site, LANE, "spark2")
    assert code == 1
    (hit,) = [r for r in refusals if r.startswith(f"spark2: runtime.nccl_env.{LANE}:")]
    for worker in workers:
        assert f"pid {worker}: NCCL_IB_MERGE_NICS=1 (environment), expected NCCL_IB_MERGE_NICS=0" in hit
    assert f"pid {server}:" not in hit  # what it set in itself is not visible from outside
    assert "as read from /proc/PID/environ at start" in hit  # and the check says so
    assert [r for r in refusals if not r.startswith("spark2: runtime.nccl_env.")] == []


#: a process that puts the probe's old exclusion text in its arguments to keep from being read
HIDING = ("setsid python3 -c 'import time; time.sleep(600)' sglang.launch_server "
          "DeepSeek-V4.1-Flash-1017 '/proc/[0-9]*/cmdline' </dev/null >/dev/null 2>&1 & echo $!")


def test_a_process_cannot_hide_behind_the_probes_text(running: Lab, site_copy: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = running.run("spark1", HIDING, timeout=30)
    assert status == 0, err
    pid = int(out.split()[-1])
    try:
        code, refusals = preflight(site_copy, running, capsys)
    finally:
        running.run("spark1", f"kill {pid}", timeout=30)
    assert code == 1
    hits = [r for r in refusals if r.startswith(f"spark1: runtime.cgroup.{LANE}:") and f"pid {pid}:" in r]
    assert hits, refusals  # judged: it runs outside the serving slice


def test_a_lane_running_nowhere_on_a_node_is_not_serving(running: Lab, site_copy: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Pre-flight (so lane switch) refuses it; `--before-launch` does not; the audit fails it
    for the proxy's active lane and lets the idle lanes be."""
    site = load_site(site_copy)
    assert site.rules.proxy is not None
    lanes.write_proxy_env(running, site.rules.proxy.key, LANE)
    unit = lanes.unit_name(site, LANE)
    status, _out, err = running.run("spark3", f"systemctl stop {unit}", timeout=60)
    assert status == 0, err
    try:
        code, refusals = preflight(site_copy, running, capsys)
        early = main(["preflight", LANE, "--before-launch", "--site", str(site_copy),
                      "--lab-dir", str(running.dir)])
        capsys.readouterr()
        audited = main(["audit", "--site", str(site_copy), "--lab-dir", str(running.dir), "--format", "json"])
        data = json.loads(capsys.readouterr().out)
    finally:
        lanes.restart(running, site, LANE, "spark3")
    assert code == 1
    assert refusals == [f"spark3: runtime.running.{LANE}: expected a process of lane {LANE} (command line "
                        "holding sglang.launch_server DeepSeek-V4.1-Flash-1017), observed not serving: "
                        "no process matches sglang.launch_server DeepSeek-V4.1-Flash-1017"]
    assert early == 0
    checks = {(n["node"], c["id"]): c["status"] for n in data["nodes"] for c in n["checks"]}
    assert audited == 1 and checks[("spark3", f"runtime.running.{LANE}")] == "fail"
    assert checks[("spark1", f"runtime.running.{LANE}")] == "pass"
    assert checks[("spark3", "runtime.running.glm-fp8")] == "skip"  # enabled, not active: idle


def test_switch_and_refused_switch(running: Lab, site_copy: Path, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    site = load_site(site_copy)
    assert site.rules.proxy is not None
    env = lanes.write_proxy_env(running, site.rules.proxy.key, "glm-fp8")
    log = tmp_path / "overrides.log"
    common = ["--site", str(site_copy), "--lab-dir", str(running.dir), "--log", str(log)]

    assert main(["lane", "switch", LANE, *common]) == 0
    assert env.read_text().splitlines()[-1] == f"SERVING_LANE={LANE}"
    assert "glm-fp8 -> dsv41-flash: done" in capsys.readouterr().out

    assert main(["lane", "status", *common]) == 0
    assert f"lane {LANE}: qualified" in capsys.readouterr().out

    faults.inject(running, "spark2", "lane-env")
    lanes.restart(running, site, LANE, "spark2")
    try:
        before = env.read_bytes()
        assert main(["lane", "switch", LANE, *common]) == 1
        out = capsys.readouterr().out
        assert "REFUSED" in out and "untouched" in out and "spark2: runtime.nccl_env" in out
        assert env.read_bytes() == before
        assert main(["lane", "status", *common]) == 1
        assert "NOT QUALIFIED" in capsys.readouterr().out
    finally:
        faults.clear(running, "spark2", "lane-env")
        lanes.restart(running, site, LANE, "spark2")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["kind"], r["lane"]) for r in records] == [("lane-switch", LANE)]


def test_status_and_triggers_read_the_lanes_own_metrics(running: Lab, site_copy: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`lane status` shows each node's scraped figures; `triggers` without --metrics scrapes
    the active lane's loopback endpoints once: a snapshot, never a sustained load (exit 4),
    which says whether the scrape was over the line (idle: none; fault lane-sessions: four
    sessions); a node whose engine is down is named."""
    site = load_site(site_copy)
    assert site.rules.proxy is not None
    lanes.write_proxy_env(running, site.rules.proxy.key, LANE)
    common = ["--site", str(site_copy), "--lab-dir", str(running.dir)]
    urls = {node: f"http://127.0.0.1:{lanes.metrics_port(running, node)}/metrics" for node in NODES}

    assert main(["lane", "status", *common]) == 0
    out = capsys.readouterr().out
    for node, url in urls.items():
        assert f"metrics {node}: {url}: sglang: running requests 0, KV-cache tokens in use 0, " \
               "sessions of ≥500000 tokens 0" in out, out
    assert main(["triggers", *common, "--json"]) == 4
    session = next(t for t in json.loads(capsys.readouterr().out)["triggers"] if t["kind"] == "session-load")
    assert session["status"] == "unknown"
    assert session["evidence"][0].startswith("snapshot, not sustained: 1 sample time in the 60-minute window "
                                             "(none with")  # the judgement first, then its source
    assert "peak concurrency 0" in session["evidence"][1]
    source = f"metrics source: the active lane {LANE} (from "
    assert any(line.startswith(source) for line in session["evidence"])
    assert [line for line in session["evidence"] if line.startswith("spark")] == [
        f"{node}: scraped {url} (2 sample(s) read)" for node, url in urls.items()
    ]

    faults.inject(running, "spark1", "lane-sessions")
    try:
        assert main(["lane", "status", *common]) == 0
        assert f"metrics spark1: {urls['spark1']}: sglang: running requests 6, KV-cache tokens in use " \
               "2,150,000, sessions of ≥500000 tokens 4" in capsys.readouterr().out
        assert main(["triggers", *common]) == 4
        out = capsys.readouterr().out
        assert "UNKNOWN long-context-concurrency" in out and "peak concurrency 4" in out
        assert "evidence: snapshot, not sustained: 1 sample time in the 60-minute window (one with" in out
    finally:
        faults.clear(running, "spark1", "lane-sessions")

    unit = lanes.unit_name(site, LANE)
    status, _out, err = running.run("spark3", f"systemctl stop {unit}", timeout=60)
    assert status == 0, err
    try:
        assert main(["lane", "status", *common]) == 1  # the active lane must serve on every node
        out = capsys.readouterr().out
        assert f"spark3: runtime.running.{LANE}: " in out and "not serving" in out
        assert f"metrics spark3: not scraped {urls['spark3']}: cannot fetch: [Errno 111] Connection refused" \
               in out
        assert main(["triggers", *common]) == 4
        out = capsys.readouterr().out
        assert "UNKNOWN long-context-concurrency" in out and "not read: spark3" in out
    finally:
        lanes.restart(running, site, LANE, "spark3")
