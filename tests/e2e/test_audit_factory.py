"""Audit, facts, preflight and triggers against the shared factory-fresh lab (read-only, plus
faults this module injects and clears: spark4 `unreachable`, spark2 `gpu-latch`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import paramiko
import pytest

from sparkbase.audit.expected import expected_for
from sparkbase.cli.main import main
from sparkbase.facts.collect import gather_fleet
from sparkbase.facts.model import NodeFacts, Unreachable
from sparkbase.model.site import Site, load_site
from sparkbase.transport import ssh_targets
from sparkbase_lab import faults
from sparkbase_lab.fleet import Lab

pytestmark = [pytest.mark.end_to_end, pytest.mark.smoke]

REPO = Path(__file__).parents[2]
NODES = ["spark1", "spark2", "spark3", "spark4"]


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(REPO)


def audit_json(lab: Lab, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    code = main(["audit", "--site", str(REPO), "--lab-dir", str(lab.dir), "--format", "json", *extra])
    return code, json.loads(capsys.readouterr().out)


def failing(data: dict[str, Any]) -> set[tuple[str, str]]:
    nodes = data["nodes"]
    assert isinstance(nodes, list)
    return {(n["node"], c["id"]) for n in nodes for c in n["checks"] if c["status"] == "fail"}


def test_factory_fleet_drifts_on_every_node(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = audit_json(lab, capsys)
    assert code == 1 and data["status"] == "drift"
    bad = failing(data)
    for node in NODES:
        assert (node, "kernel.release") in bad
        assert (node, "stamp") in bad
        assert (node, "host.boot_target") in bad
    assert (NODES[0], "gpu.clock") not in bad


def test_facts_come_back_in_one_round_trip_per_node(
    lab: Lab, site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    original = paramiko.SSHClient.exec_command

    def counting(self: paramiko.SSHClient, command: str, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        calls.append(command)
        return original(self, command, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(paramiko.SSHClient, "exec_command", counting)
    targets = ssh_targets(site, lab.dir)
    plans = {node: expected_for(site, node).plan() for node in NODES}
    gathered = gather_fleet(targets, plans)
    assert len(calls) == 4
    assert all(isinstance(f, NodeFacts) for f in gathered.values())
    for facts in gathered.values():
        assert isinstance(facts, NodeFacts)
        assert facts.kernel_release == "6.17.0-1008-nvidia" and facts.page_size == 4096
        assert facts.fast_cpus == (5, 6, 7, 8, 9, 15, 16, 17, 18, 19)
        assert facts.errors == {}, facts.errors


def _wrong_known_hosts(lab: Lab, tmp_path: Path, victim: str) -> Path:
    """A known_hosts where `victim`'s entry carries another node's key."""
    lines = lab.known_hosts_path.read_text().splitlines()
    victim_port = f"[127.0.0.1]:{lab.port(victim)}"
    other = next(line for line in lines if line.startswith(f"[127.0.0.1]:{lab.port('spark1')}"))
    out = [line for line in lines if not line.startswith(victim_port)]
    out.append(victim_port + " " + other.split(" ", 1)[1])
    path = tmp_path / "known_hosts"
    path.write_text("\n".join(out) + "\n")
    return path


def test_strict_host_key_refuses_a_wrong_key(lab: Lab, site: Site, tmp_path: Path) -> None:
    bad = _wrong_known_hosts(lab, tmp_path, "spark3")
    targets = {n: replace(t, known_hosts=bad) for n, t in ssh_targets(site, lab.dir).items()}
    gathered = gather_fleet(targets, {node: expected_for(site, node).plan() for node in NODES})
    victim = gathered["spark3"]
    assert isinstance(victim, Unreachable) and "host key mismatch" in victim.reason
    assert all(isinstance(gathered[n], NodeFacts) for n in ("spark1", "spark2", "spark4"))


def test_testinfra_suite_is_strict_too(lab: Lab, tmp_path: Path) -> None:
    bad = _wrong_known_hosts(lab, tmp_path, "spark3")
    hosts = "paramiko://spark1,paramiko://spark3"
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        str(REPO / "checks"),
        f"--hosts={hosts}",
        f"--ssh-config={lab.ssh_config_path}",
        f"--sparkbase-site={REPO}",
        f"--sparkbase-known-hosts={bad}",
        "-k",
        "kernel.page_size",
        "-rA",
    ]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False).stdout
    assert "PASSED sparkbase-checks::test_check[kernel.page_size-paramiko://spark1]" in out
    assert "FAILED sparkbase-checks::test_check[kernel.page_size-paramiko://spark3]" in out
    assert "host key mismatch" in out


def test_testinfra_suite_reads_as_the_drift(lab: Lab) -> None:
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        str(REPO / "checks"),
        "--hosts=paramiko://spark1",
        f"--ssh-config={lab.ssh_config_path}",
        f"--sparkbase-site={REPO}",
        "-k",
        "kernel.release or fleet.kernel",
    ]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False)
    assert result.returncode == 1
    assert "spark1: kernel.release: expected 6.17.0-1032-nvidia, observed 6.17.0-1008-nvidia" in result.stdout


def test_unreachable_node_exits_3_and_others_are_reported(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    faults.inject(lab, "spark4", "unreachable")
    try:
        code, data = audit_json(lab, capsys)
    finally:
        faults.clear(lab, "spark4", "unreachable")
    assert code == 3 and data["status"] == "unreachable"
    nodes = {n["node"]: n for n in data["nodes"]}
    assert nodes["spark4"]["reachable"] is False and "refused" in nodes["spark4"]["reason"]
    for node in ("spark1", "spark2", "spark3"):
        assert nodes[node]["reachable"] is True
        assert any(c["id"] == "kernel.release" and c["status"] == "fail" for c in nodes[node]["checks"])
    _wait_reachable(lab, "spark4")


def _wait_reachable(lab: Lab, node: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lab.run(node, "true", timeout=10)[0] == 0:
            return
        time.sleep(0.3)
    pytest.fail(f"{node} did not come back after clearing the fault")


def test_latched_gpu_is_named_on_its_node(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    _, before = audit_json(lab, capsys)
    faults.inject(lab, "spark2", "gpu-latch")
    try:
        _, after = audit_json(lab, capsys)
    finally:
        faults.clear(lab, "spark2", "gpu-latch")
    assert failing(after) - failing(before) == {("spark2", "gpu.clock")}
    check = next(
        c
        for n in after["nodes"]
        if n["node"] == "spark2"
        for c in n["checks"]
        if c["id"] == "gpu.clock"
    )
    assert check["fix"] == "full AC disconnect (unplug power), then re-run" and "611 MHz" in check["observed"]


@pytest.mark.parametrize("lane", ["ds41f-ring4", "dsv41-flash", "glm-fp8", "glm-nvfp4"])
def test_preflight_refuses_on_a_factory_fleet(
    lab: Lab, lane: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["preflight", lane, "--site", str(REPO), "--lab-dir", str(lab.dir)])
    out = capsys.readouterr().out
    assert code == 1
    assert "spark1: kernel.release: expected" in out
    assert f"preflight {lane}: REFUSED" in out
    if lane == "ds41f-ring4":
        assert "lane: lane ds41f-ring4 is disabled (evaluated and rejected by the site)" in out
        assert "breaks the site contract: kernel line" in out


def test_preflight_override_is_logged(lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "overrides.log"
    argv = ["preflight", "glm-fp8", "--site", str(REPO), "--lab-dir", str(lab.dir), "--log", str(log)]
    assert main([*argv, "--override", "bring-up test on a factory fleet"]) == 0
    assert "OVERRIDDEN" in capsys.readouterr().err
    record = json.loads(log.read_text())
    assert record["kind"] == "preflight-override" and record["lane"] == "glm-fp8"
    assert record["reason"] == "bring-up test on a factory fleet"
    assert any(line.startswith("spark1: kernel.release") for line in record["refusals"])


def test_triggers_report_the_live_fleet(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    metrics = REPO / "tests" / "fixtures" / "metrics"
    code = main(
        [
            "triggers",
            "--site",
            str(REPO),
            "--lab-dir",
            str(lab.dir),
            "--json",
            "--metrics",
            str(metrics / "two-500k-sessions.prom"),
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    kernel = next(t for t in data["triggers"] if t["kind"] == "kernel-pin")
    assert "spark3: running 6.17.0-1008-nvidia, page size 4096" in kernel["evidence"]
    assert main(["triggers", "--site", str(REPO), "--metrics", str(metrics / "four-500k-sessions.prom")]) == 1
