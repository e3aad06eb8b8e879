"""Hardening, end to end: an unknown or changed host key is refused everywhere, with
instructions, and known_hosts is never modified.

One factory-fresh lab (port base 2841). spark2's known_hosts entry is removed (unknown
host), then replaced by spark3's key (changed key). audit, preflight, plan, apply (pyinfra)
and the native checks suite (pytest-testinfra) must each refuse spark2, say how to verify
and enrol its key, still report the other nodes, and leave known_hosts byte-identical.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from fleets import REPO, Fleet, fleet_for_module
from ports import port_base

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_HARDENING_HOSTKEYS_PORT_BASE", 2841)
HELP = "enrol it by hand in the site's known_hosts (README: Host keys)"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    yield from fleet_for_module(tmp_path_factory, "hardening-hostkeys", PORT_BASE)


def _entry(lines: list[str], node: str) -> int:
    return next(i for i, line in enumerate(lines) if f",{node}," in line.split()[0] + ",")


@pytest.fixture(params=["unknown", "changed"])
def bad_key(fleet: Fleet, request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """spark2's known_hosts entry missing or carrying another node's key; restored after."""
    path = fleet.lab.known_hosts_path
    good = path.read_text()
    lines = good.splitlines()
    two = _entry(lines, "spark2")
    if request.param == "unknown":
        del lines[two]
        words = ("host key not in known_hosts (refused)",)
    else:
        other = lines[_entry(lines, "spark3")].split()
        lines[two] = " ".join([lines[two].split()[0], *other[1:]])
        words = ("host key mismatch",)
    path.write_text("\n".join(lines) + "\n")
    broken = path.read_text()
    try:
        yield words[0], broken
    finally:
        assert path.read_text() == broken, "sparkbase modified known_hosts"
        path.write_text(good)


def test_audit_refuses_the_node_and_says_how_to_enrol(fleet: Fleet, bad_key: tuple[str, str]) -> None:
    words, _ = bad_key
    done = fleet.sparkbase("audit", "--format", "json")
    assert done.returncode == 3, done.stdout + done.stderr
    nodes = {n["node"]: n for n in json.loads(done.stdout)["nodes"]}
    assert not nodes["spark2"]["reachable"]
    assert words in nodes["spark2"]["reason"] and HELP in nodes["spark2"]["reason"]
    assert all(nodes[n]["reachable"] for n in ("spark1", "spark3", "spark4"))
    table = fleet.sparkbase("audit")
    assert table.returncode == 3 and HELP in table.stdout + table.stderr


def test_preflight_refuses_the_node_and_says_how_to_enrol(fleet: Fleet, bad_key: tuple[str, str]) -> None:
    words, _ = bad_key
    done = fleet.sparkbase("preflight", "dsv41-flash")
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert "REFUSED" in said and words in said and HELP in said


def test_plan_and_apply_refuse_the_node_and_say_how_to_enrol(fleet: Fleet, bad_key: tuple[str, str]) -> None:
    words, _ = bad_key
    for command in (("plan", "--json"), ("apply", "--yes", "--json")):
        done = fleet.sparkbase(*command)
        assert done.returncode == 3 if command[0] == "plan" else done.returncode in (1, 3), done.stderr
        nodes = {n["node"]: n for n in json.loads(done.stdout)["nodes"]}
        assert nodes["spark2"]["status"] == "unreachable", nodes["spark2"]
        assert words in nodes["spark2"]["message"] and HELP in nodes["spark2"]["message"]
        assert nodes["spark2"]["operations"] == []
        assert nodes["spark1"]["status"] in ("would change", "reboot pending", "failed", "changed")
    # OpenSSH refuses a new connection as well (`Lab.run` may reuse one made before the fixture)
    assert subprocess.run(fleet.lab.ssh_argv("spark2", ["true"]), capture_output=True, timeout=60,
                          check=False).returncode != 0


def test_native_checks_suite_refuses_the_node(fleet: Fleet, bad_key: tuple[str, str]) -> None:
    words, _ = bad_key
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REPO / "checks"),
            "--hosts=paramiko://spark1,paramiko://spark2", f"--ssh-config={fleet.lab.ssh_config_path}",
            f"--sparkbase-site={fleet.site}", f"--sparkbase-known-hosts={fleet.lab.known_hosts_path}",
            "-k", "kernel.page_size", "-rA"]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False, timeout=300).stdout
    assert "PASSED sparkbase-checks::test_check[kernel.page_size-paramiko://spark1]" in out
    assert "FAILED sparkbase-checks::test_check[kernel.page_size-paramiko://spark2]" in out
    assert words in out and HELP in out


def test_native_checks_over_openssh_refuse_the_node_even_with_a_lax_ssh_config(
    fleet: Fleet, bad_key: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`pytest checks/ --hosts=ssh://…` is held to the host key whatever the ssh_config says:
    a config that turns strict checking off and reads no known_hosts is overruled."""
    words, _ = bad_key
    lax = tmp_path_factory.mktemp("lax") / "ssh_config"
    text = fleet.lab.ssh_config_path.read_text()
    text = text.replace("StrictHostKeyChecking yes", "StrictHostKeyChecking no")
    text = text.replace(f"UserKnownHostsFile {fleet.lab.known_hosts_path}", "UserKnownHostsFile /dev/null")
    assert "StrictHostKeyChecking no" in text and "UserKnownHostsFile /dev/null" in text
    lax.write_text(text)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REPO / "checks"),
            "--hosts=ssh://spark1,ssh://spark2", f"--ssh-config={lax}",
            f"--sparkbase-site={fleet.site}", f"--sparkbase-known-hosts={fleet.lab.known_hosts_path}",
            "-k", "kernel.page_size", "-rA"]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False, timeout=300).stdout
    assert "PASSED sparkbase-checks::test_check[kernel.page_size-ssh://spark1]" in out, out
    assert "FAILED sparkbase-checks::test_check[kernel.page_size-ssh://spark2]" in out, out
    assert words in out and HELP in out
