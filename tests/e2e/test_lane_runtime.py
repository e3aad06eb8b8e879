"""The lane runtime on the emulated fleet: this module's own lab (ports 2901…), a clone of
the run's converged image (`sparkbase apply --allow-reboot --yes`, see fleets.py), the
production lane's stand-in started on every node; then each runtime finding (one fault, one
node), a lane switch and a refused switch (the .env untouched), and `lane status`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleets import NODES, ConvergedImage, clone_fleet
from ports import port_base

from sparkbase.cli.main import main
from sparkbase.lab import faults, lanes
from sparkbase.lab.fleet import Lab
from sparkbase.model.site import load_site

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


def test_a_conforming_lane_passes_its_runtime_checks(running: Lab, site_copy: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, refusals = preflight(site_copy, running, capsys)
    assert (code, refusals) == (0, [])
    main(["audit", "--site", str(site_copy), "--lab-dir", str(running.dir), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    passed = {(n["node"], c["id"]) for n in data["nodes"] for c in n["checks"]
              if c["id"].startswith("runtime.") and c["status"] == "pass"}
    for node in ("spark1", "spark2", "spark3", "spark4"):
        for kind in ("nccl_env", "nccl_library", "affinity", "cgroup"):
            assert (node, f"runtime.{kind}.{LANE}") in passed


FINDINGS = [  # fault on one node -> the runtime check that names it, and what it says
    ("spark2", "lane-env", "runtime.nccl_env",
     "NCCL_IB_MERGE_NICS=1 (environment), expected NCCL_IB_MERGE_NICS=0"),
    ("spark3", "lane-private-nccl", "runtime.nccl_library",
     "maps /opt/lane-image/lib/libnccl.so.2, not the pinned"),
    ("spark4", "lane-outside-slice", "runtime.affinity", "Cpus_allowed_list 0-"),
    ("spark4", "lane-outside-slice", "runtime.cgroup", "is outside sparkbase-serving.slice"),
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
    the active lane's loopback endpoints: idle is quiet, fault lane-sessions fires, a node
    whose engine is down is named and keeps the verdict from being quiet."""
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
    assert main(["triggers", *common, "--json"]) == 0
    session = next(t for t in json.loads(capsys.readouterr().out)["triggers"] if t["kind"] == "session-load")
    assert session["status"] == "quiet"
    assert session["evidence"][0].startswith("1 sample time(s)")  # the judgement first, then its source
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
        assert main(["triggers", *common]) == 1
        assert "FIRED   long-context-concurrency" in capsys.readouterr().out
    finally:
        faults.clear(running, "spark1", "lane-sessions")

    unit = lanes.unit_name(site, LANE)
    status, _out, err = running.run("spark3", f"systemctl stop {unit}", timeout=60)
    assert status == 0, err
    try:
        assert main(["lane", "status", *common]) == 0  # informs: a lane not serving yet may qualify
        assert f"metrics spark3: not scraped {urls['spark3']}: cannot fetch: [Errno 111] Connection refused" \
               in capsys.readouterr().out
        assert main(["triggers", *common]) == 4
        out = capsys.readouterr().out
        assert "UNKNOWN long-context-concurrency" in out and "not read: spark3" in out
    finally:
        lanes.restart(running, site, LANE, "spark3")
