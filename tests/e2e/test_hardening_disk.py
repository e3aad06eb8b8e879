"""Hardening, end to end: a full disk during an apply leaves the old file whole.

One factory-fresh lab (port base 2831). The machine's disk is never filled: a 2 MiB tmpfs
is mounted over spark1's `/etc/sparkbase` inside the node's own mount namespace (nsenter),
holding an old stamp, and filled to the last byte. The apply must fail cleanly on that
node, the old stamp must be intact, and once the disk has room the re-run converges and
leaves no half-written upload behind. The tmpfs is always unmounted.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
from fleets import SITE_KERNEL, Fleet, fleet_for_module
from ports import port_base

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_HARDENING_DISK_PORT_BASE", 2831)
STAMP = "/etc/sparkbase/stamp.json"
OLD = '{"format": 1, "baseline": "an older one"}\n'


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    yield from fleet_for_module(tmp_path_factory, "hardening-disk", PORT_BASE)


def _nsenter(fleet: Fleet, node: str, *command: str) -> subprocess.CompletedProcess[str]:
    """Run a command in `node`'s mount namespace, with the node's root (not over SSH)."""
    argv = ["nsenter", "-t", str(fleet.lab.node_pid(node)), "-m", "-r", "-w", *command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture
def full_disk(fleet: Fleet) -> Iterator[None]:
    """spark1's /etc/sparkbase on a 2 MiB tmpfs holding the old stamp, filled up."""
    fleet.sh("spark1", "mkdir -p /etc/sparkbase")
    mounted = _nsenter(fleet, "spark1", "mount", "-t", "tmpfs", "-o", "size=2m,mode=755", "tmpfs",
                       "/etc/sparkbase")
    assert mounted.returncode == 0, mounted.stderr
    try:
        fleet.sh("spark1", f"printf '%s' '{OLD.strip()}' > {STAMP} && echo >> {STAMP}")
        fleet.lab.run("spark1", "dd if=/dev/zero of=/etc/sparkbase/fill bs=4k 2>/dev/null")
        free = fleet.sh("spark1", "df --output=avail -B1 /etc/sparkbase | tail -1").strip()
        assert int(free) == 0, free
        yield
    finally:
        fleet.lab.run("spark1", "rm -f /etc/sparkbase/fill")
        gone = _nsenter(fleet, "spark1", "umount", "/etc/sparkbase")
        assert gone.returncode == 0, gone.stderr
    assert "tmpfs" not in _nsenter(fleet, "spark1", "findmnt", "-n", "-o", "FSTYPE",
                                   "/etc/sparkbase").stdout


def test_a_full_disk_fails_the_apply_cleanly_and_the_old_file_stays_whole(
    fleet: Fleet, full_disk: None
) -> None:
    done = fleet.sparkbase("apply", "--limit", "spark1", "--yes", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    node = json.loads(done.stdout)["nodes"][0]
    assert node["status"] == "failed" and node["message"]
    stamp = next(op for op in node["operations"] if op["name"].startswith(STAMP))
    assert stamp["status"] == "failed"
    assert "Traceback" not in done.stderr
    assert fleet.sh("spark1", f"cat {STAMP}") == OLD


def test_with_room_again_the_rerun_converges_and_leaves_no_partial_upload(fleet: Fleet) -> None:
    done = fleet.sparkbase("apply", "--limit", "spark1", "--allow-reboot", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert fleet.sh("spark1", "uname -r").strip() == SITE_KERNEL
    assert json.loads(fleet.sh("spark1", f"cat {STAMP}"))["baseline"] == "site-stock-6.17-4k"
    assert fleet.lab.run("spark1", f"ls -d {STAMP}.sparkbase-new*")[0] != 0
    assert fleet.sparkbase("plan", "--limit", "spark1").returncode == 0
