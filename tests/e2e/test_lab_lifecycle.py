"""`up`/`down` of a lab of its own: idempotence, refusals, nothing left behind, disks kept."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from ports import port_base

from sparkbase_lab import procs
from sparkbase_lab.fleet import Lab, LabError

pytestmark = pytest.mark.end_to_end

#: its own ports (it shared 2351 with the converged-audit module: they could not run side by side)
PORT_BASE = port_base("SPARKBASE_TEST_LIFECYCLE_PORT_BASE", 2451)


@pytest.fixture
def small_lab(tmp_path: Path) -> Iterator[Lab]:
    lab = Lab(tmp_path / "lab", port_base=PORT_BASE)
    try:
        yield lab
    finally:
        lab.down()


def recorded_pids(lab: Lab) -> list[procs.Proc]:
    import json

    state = json.loads(lab.state_path.read_text())
    out = [procs.Proc.from_json(state["supervisor"])]
    for node in state["nodes"].values():
        out += [procs.Proc.from_json(node["init"]), procs.Proc.from_json(node["unshare"])]
    return out


def test_up_down_leaves_nothing_behind(small_lab: Lab) -> None:
    lab = small_lab
    assert lab.up(2) is True
    assert lab.up(2) is False, "up with the same N is a no-op"
    with pytest.raises(LabError, match="already up"):
        lab.up(3)
    pids = recorded_pids(lab)
    node_procs = [p for s in lab.status() if s.pid for p in procs.descendants(s.pid)]
    assert node_procs, "each node runs sshd"
    rc, _, _ = lab.run("spark1", "echo kept > /root/disk-file")
    assert rc == 0
    assert lab.down() is True
    assert not any(procs.exists(p) for p in pids), "no process (nor zombie) of ours is left"
    assert not any(Path(f"/proc/{pid}").exists() for pid in node_procs)
    assert lab.mounts() == []
    mountinfo = Path("/proc/self/mountinfo").read_text()
    assert str(lab.dir) not in mountinfo
    assert not procs.port_answers(PORT_BASE) and not procs.port_answers(PORT_BASE + 1)
    assert not lab.state_path.exists()
    assert lab.down() is False
    # disks are kept: the same node comes back with its files and host key
    known = lab.known_hosts_path.read_text()
    lab.up(2)
    assert lab.run("spark1", "cat /root/disk-file")[1] == "kept\n"
    assert lab.known_hosts_path.read_text() == known
    lab.down(purge=True)
    lab.up(2)
    assert lab.run("spark1", "test -e /root/disk-file")[0] == 1, "purge makes nodes factory-fresh"
    assert lab.known_hosts_path.read_text() == known, "host keys survive a purge"


def test_refuses_a_port_that_answers(small_lab: Lab) -> None:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", PORT_BASE + 1))
        sock.listen(1)
        with pytest.raises(LabError, match=f"port {PORT_BASE + 1} already answers"):
            small_lab.up(2)
    assert not small_lab.is_up()
    assert not procs.port_answers(PORT_BASE)


def test_recovers_from_a_crashed_supervisor(small_lab: Lab) -> None:
    import signal

    lab = small_lab
    lab.up(1)
    pids = recorded_pids(lab)
    procs.kill(pids[0], signal.SIGKILL)  # the supervisor dies; its node keeps running
    procs.wait_gone([pids[0]], 5)
    assert not lab.is_up()
    assert lab.up(1) is True, "a stale lab is cleaned up and started again"
    assert not any(procs.alive(p) for p in pids[1:])
    assert lab.run("spark1", "hostname")[1] == "spark1\n"
