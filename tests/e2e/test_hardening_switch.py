"""Hardening, end to end: `lane switch` against overlapping runs on a real emulated fleet.

One factory-fresh lab for the module (port base 3161 + SPARKBASE_TEST_PORT_OFFSET) with a
private copy of the shipped site; every switch passes `--override` (the factory nodes do not
qualify, and the cases are about the locks, not the gate). A switch is held inside its
pre-flight by a `uname` on spark1 that waits for the test's word (`held_gate`), so each
overlap below is certain, not a matter of timing:
1. two switches at once: exactly one proceeds, the other refuses naming the first's pid,
   and the override log has exactly the one that happened;
2. a switch while an apply holds a node of the lane (held through the locks API: the
   local lock of this site; the node lock on spark3 of an apply from another machine) is
   refused naming the holder, and takes nothing with it;
3. while a switch is in its pre-flight, an apply on a node of the lane (same site: the
   local lock; another site copy: the node lock) is refused naming the switch;
4. a node of the lane that cannot be reached for its lock (as while an apply reboots it)
   refuses the switch.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleets import NODES, Fleet, copy_site, fleet_for_module
from ports import port_base

from sparkbase.deploy.locks import Owner, local_lock_dir, local_locks
from sparkbase.model.site import load_site
from sparkbase_lab import faults, lanes

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_HARDENING_SWITCH_PORT_BASE", 3161)
HELD_MARK = "/run/sparkbase-test-gate-held"
RELEASE = "/run/sparkbase-test-gate-release"
#: `uname` on a node: marks that it runs, then waits (at most 40 s, within the audit's
#: command timeout) for the test's release file
HELD_UNAME = """#!/bin/sh
: > {mark}
i=0
while [ ! -e {release} ] && [ $i -lt 400 ]; do sleep 0.1; i=$((i + 1)); done
exec {real} "$@"
"""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    yield from fleet_for_module(tmp_path_factory, "hardening-switch", PORT_BASE)


@pytest.fixture
def env(fleet: Fleet) -> Path:
    """The lab's proxy .env, naming glm-fp8, before every case."""
    proxy = load_site(fleet.site).rules.proxy
    assert proxy is not None
    return lanes.write_proxy_env(fleet.lab, proxy.key, "glm-fp8")


@pytest.fixture
def log(fleet: Fleet) -> Iterator[Path]:
    """The site's override log, empty at the start of every case."""
    path = fleet.site / ".sparkbase" / "overrides.log"
    path.unlink(missing_ok=True)
    yield path


def _switch_argv(fleet: Fleet, lane: str, site: Path | None = None) -> list[str]:
    return [sys.executable, "-m", "sparkbase.cli.main", "lane", "switch", lane,
            "--site", str(site or fleet.site), "--lab-dir", str(fleet.lab.dir),
            "--override", f"e2e: switch to {lane}"]


def _start_switch(fleet: Fleet, lane: str) -> subprocess.Popen[str]:
    return subprocess.Popen(_switch_argv(fleet, lane), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _node_lock(fleet: Fleet, node: str) -> str | None:
    """The owner record of `node`'s lock, None when no lock is there."""
    status, out, _ = fleet.lab.run(node, "cat /run/sparkbase/apply.lock/owner")
    return out if status == 0 else None


@pytest.fixture
def held_gate(fleet: Fleet) -> Iterator[Fleet]:
    """`uname` on spark1 waits in every pre-flight until `_release_gate`; undone after."""
    real = fleet.sh("spark1", "command -v uname").strip()
    assert real and real != "/usr/local/sbin/uname", real
    fleet.sh("spark1", f"rm -f {HELD_MARK} {RELEASE} && cat > /usr/local/sbin/uname && "
                       "chmod 755 /usr/local/sbin/uname",
             input=HELD_UNAME.format(mark=HELD_MARK, release=RELEASE, real=real))
    try:
        yield fleet
    finally:
        fleet.sh("spark1", f"rm -f /usr/local/sbin/uname {HELD_MARK}; : > {RELEASE}")


def _release_gate(fleet: Fleet) -> None:
    fleet.sh("spark1", f": > {RELEASE}")


def _wait_gate_held(fleet: Fleet, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    """Wait until `proc`'s pre-flight waits in spark1's `uname` (fail if it ends first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fleet.lab.run("spark1", f"test -e {HELD_MARK}")[0] == 0:
            return
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the switch ended before its pre-flight reached spark1:\n{out}\n{err}")
        time.sleep(0.1)
    pytest.fail(f"no pre-flight reached spark1 within {timeout:.0f}s")


def _first_to_end(procs: list[subprocess.Popen[str]], timeout: float) -> subprocess.Popen[str] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                return proc
        time.sleep(0.1)
    return None


def test_two_switches_at_once_one_proceeds_one_names_the_holder(
    held_gate: Fleet, env: Path, log: Path
) -> None:
    fleet = held_gate
    first = _start_switch(fleet, "dsv41-flash")
    second = _start_switch(fleet, "glm-nvfp4")
    try:
        ended = _first_to_end([first, second], timeout=90)  # the refused one, while the other waits
    finally:
        _release_gate(fleet)
    outputs = {proc.pid: proc.communicate(timeout=300) for proc in (first, second)}
    codes = sorted([first.returncode, second.returncode])
    assert codes == [0, 1], outputs
    winner, loser = (first, second) if first.returncode == 0 else (second, first)
    assert ended is loser, "the refused switch must end while the other is still in its pre-flight"
    lane = "dsv41-flash" if winner is first else "glm-nvfp4"
    out, err = outputs[loser.pid]
    assert (f"REFUSED: {env}: another lane switch holds the switch lock (root@{socket.gethostname()} "
            f"pid {winner.pid} since ") in out, out + err
    assert f"{env} untouched" in out
    assert f"lane switch glm-fp8 -> {lane}: done OVERRIDDEN" in outputs[winner.pid][0]
    assert env.read_text().splitlines()[-1] == f"SERVING_LANE={lane}"
    records = _records(log)
    assert [(r["kind"], r["from"], r["lane"]) for r in records] == [("lane-switch", "glm-fp8", lane)], records
    assert all(_node_lock(fleet, node) is None for node in NODES)  # every node lock given back


@pytest.mark.parametrize("where", ["local", "node"])
def test_a_switch_while_an_apply_holds_a_node_of_the_lane_is_refused(
    fleet: Fleet, env: Path, log: Path, where: str
) -> None:
    """The apply's locks held through the locks API: the local one by this process (an apply
    of this site), the node lock on spark3 by an apply of another machine (all that is seen
    of it from here)."""
    before = env.read_bytes()
    if where == "local":
        with local_locks(local_lock_dir(fleet.site), ["spark3"], Owner()):
            refused = subprocess.run(_switch_argv(fleet, "dsv41-flash"), capture_output=True, text=True,
                                     timeout=300, check=False)
        holder = f"root@{socket.gethostname()} pid {os.getpid()} since "
    else:
        other = Owner(user="someone", host="elsewhere", pid=4242)
        fleet.sh("spark3", f"mkdir -p /run/sparkbase/apply.lock && echo '{other.json()}' > "
                           "/run/sparkbase/apply.lock/owner")
        try:
            refused = subprocess.run(_switch_argv(fleet, "dsv41-flash"), capture_output=True, text=True,
                                     timeout=300, check=False)
            assert other.token in (_node_lock(fleet, "spark3") or "")  # the holder's lock is left alone
        finally:
            fleet.sh("spark3", "rm -rf /run/sparkbase/apply.lock")
        holder = "someone@elsewhere pid 4242 since "
    said = refused.stdout + refused.stderr
    assert refused.returncode == 1, said
    refusal = f"REFUSED: spark3: another apply holds the {where} lock ({holder}"
    assert f"lane switch glm-fp8 -> dsv41-flash: {refusal}" in refused.stdout, said
    assert env.read_bytes() == before
    assert _records(log) == []
    assert all(_node_lock(fleet, node) is None for node in NODES)  # the refused switch took nothing with it
    with local_locks(local_lock_dir(fleet.site), NODES, Owner()):  # nor any local lock
        pass


@pytest.mark.parametrize("where", ["local", "node"])
def test_an_apply_cannot_start_on_a_node_of_the_lane_while_a_switch_runs(
    held_gate: Fleet, env: Path, log: Path, where: str, tmp_path: Path
) -> None:
    fleet = held_gate
    site = fleet.site if where == "local" else copy_site(tmp_path / "site")
    switch = _start_switch(fleet, "dsv41-flash")
    try:
        _wait_gate_held(fleet, switch)
        apply = subprocess.run(fleet.argv("apply", "--limit", "spark2", "--yes", "--json", site=site),
                               capture_output=True, text=True, timeout=600, check=False)
    finally:
        _release_gate(fleet)
    out, err = switch.communicate(timeout=300)
    assert switch.returncode == 0, out + err
    assert apply.returncode == 1, apply.stdout + apply.stderr
    spark2 = next(n for n in json.loads(apply.stdout)["nodes"] if n["node"] == "spark2")
    assert spark2["status"] == "locked", spark2
    assert spark2["message"].startswith(
        f"spark2: another lane switch holds the {where} lock (root@{socket.gethostname()} "
        f"pid {switch.pid} since "
    ), spark2["message"]
    assert [r["lane"] for r in _records(log)] == ["dsv41-flash"]
    assert all(_node_lock(fleet, node) is None for node in NODES)


def test_a_switch_onto_a_node_that_cannot_be_reached_for_its_lock_is_refused(
    fleet: Fleet, env: Path, log: Path
) -> None:
    """A node an apply is rebooting shows no lock from another machine (its /run is gone):
    a switch that cannot ask a node of the lane does not go ahead."""
    before = env.read_bytes()
    faults.inject(fleet.lab, "spark4", "unreachable")
    try:
        refused = subprocess.run(_switch_argv(fleet, "dsv41-flash"), capture_output=True, text=True,
                                 timeout=300, check=False)
    finally:
        faults.clear(fleet.lab, "spark4", "unreachable")
        fleet.wait_ssh("spark4")
    said = refused.stdout + refused.stderr
    assert refused.returncode == 1, said
    refusal = "lane switch glm-fp8 -> dsv41-flash: REFUSED: spark4: cannot take the node lock: "
    assert refusal in refused.stdout, said
    assert "never switched onto: an apply may be rebooting it" in refused.stdout, said
    assert env.read_bytes() == before
    assert _records(log) == []
    assert all(_node_lock(fleet, node) is None for node in NODES)
