"""Hardening, end to end: links and odd files where sparkbase writes or reads (issue 20, 4).

One factory-fresh lab for the module (port base 3171); each case on its own node:
1. spark1: a symbolic link to a victim file planted at every temp name an upload of this
   apply could take (the rendered files, the stamp, the MOK key and certificate, /etc/fstab
   and the ownership record; 0.4.1's fixed `<path>.sparkbase-new` and the new shape): the
   apply converges, the victim's content, mode and owner are untouched, the links are gone;
2. spark2: /etc/nccl.conf is a directory: plan and apply refuse naming it, a second apply says
   the same, nothing is recorded as sparkbase's, the directory and its content are untouched;
3. spark3: /etc/nccl.conf is a symbolic link to a file holding a secret: plan (table and
   JSON) says it is a link and where it points, never the secret; apply refuses (the rule:
   sparkbase did not make the link, so it neither writes through it nor replaces it), and
   the link and its target stay as they were.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fleets import Fleet, fleet_for_module
from ports import port_base

from sparkbase.model.ownership import OWNERSHIP_PATH, parse_record

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_HARDENING_LINKS_PORT_BASE", 3281)
NCCL = "/etc/nccl.conf"
VARIANT = "ds41f-7x-64k"
OVERRIDE = ("--override-policy", "e2e: hardening links")
MOK_DIR = "/var/lib/shim-signed/mok"
#: written by the variant's apply besides its operations' own paths
ALWAYS = (OWNERSHIP_PATH, "/etc/fstab", f"{MOK_DIR}/MOK.priv", f"{MOK_DIR}/MOK.der")
VICTIM = "/root/victim"
SECRET = "linksafe-e2e-secret-5d1b7c"
SECRET_FILE = "/root/secret.txt"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    yield from fleet_for_module(tmp_path_factory, "hardening-links", PORT_BASE)


def _report(done: Any) -> dict[str, Any]:
    node: dict[str, Any] = json.loads(done.stdout)["nodes"][0]
    return node


def _identity(fleet: Fleet, node: str, path: str) -> str:
    """A file's content hash, mode, owner and inode, as one text (without following a link)."""
    return fleet.sh(node, f"stat -c '%a %U:%G %i %F' {path} && sha256sum {path}")


def _owned(fleet: Fleet, node: str) -> list[str]:
    """The targets the node's ownership record holds (none when there is no record)."""
    status, out, _ = fleet.lab.run(node, f"cat {OWNERSHIP_PATH}")
    return [item.target for item in parse_record(out).items] if status == 0 else []


def _written_paths(fleet: Fleet, node: str) -> list[str]:
    """Every path the apply will write on `node`: its operations named by a path, and the
    files every write path reaches (record, fstab, MOK key pair)."""
    shown = fleet.sparkbase("plan", "--limit", node, "--baseline", VARIANT, "--json")
    assert shown.returncode in (0, 1), shown.stdout + shown.stderr
    names = [op["name"].split()[0] for op in _report(shown)["operations"]]
    return sorted({*(name for name in names if name.startswith("/")), *ALWAYS})


def test_links_at_every_temp_name_are_never_written_through(fleet: Fleet) -> None:
    move = ("--baseline", VARIANT, *OVERRIDE)
    paths = _written_paths(fleet, "spark1")
    assert NCCL in paths and f"{MOK_DIR}/MOK.priv" in paths and len(paths) > 8, paths
    fleet.sh("spark1", f"printf 'victim\\n' > {VICTIM} && chmod 640 {VICTIM} && chown 65534:65534 {VICTIM} "
                       f"&& install -d -m 700 {MOK_DIR} /var/lib/sparkbase")
    for path in paths:
        fleet.sh("spark1", f"mkdir -p $(dirname {path}) && ln -s {VICTIM} {path}.sparkbase-new "
                           f"&& ln -s {VICTIM} {path}.sparkbase-new.0123456789abcdef")
    before = _identity(fleet, "spark1", VICTIM)
    done = fleet.sparkbase("apply", "--limit", "spark1", *move, "--yes", "--json")
    assert _identity(fleet, "spark1", VICTIM) == before  # content (sha256), mode, owner, inode
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    node = _report(done)  # the variant's kernel is staged: its reboot is left pending
    assert node["status"] in ("changed", "reboot pending"), done.stdout + done.stderr[-3000:]
    assert not [op for op in node["operations"] if op["status"] in ("failed", "not run")], done.stdout
    # the planted links are not sparkbase's: every write leaves them as they were (no upload
    # used them), never followed, never removed
    for path in (NCCL, OWNERSHIP_PATH, f"{MOK_DIR}/MOK.priv"):
        left = fleet.lab.run("spark1", f"ls -d {path}.sparkbase-new*")[1].split()
        assert left == [f"{path}.sparkbase-new", f"{path}.sparkbase-new.0123456789abcdef"], (path, left)
        assert fleet.sh("spark1", f"readlink {path}.sparkbase-new").strip() == VICTIM
    assert fleet.sh("spark1", f"stat -c %F {NCCL}").strip() == "regular file"
    assert NCCL in _owned(fleet, "spark1")


def test_a_directory_at_a_target_is_refused_by_name_and_nothing_is_recorded(fleet: Fleet) -> None:
    fleet.sh("spark2", f"mkdir {NCCL} && printf 'kept\\n' > {NCCL}/inside")
    before = fleet.sh("spark2", f"ls -lA --time-style=+%s {NCCL}; cat {NCCL}/inside")
    shown = fleet.sparkbase("plan", "--limit", "spark2")
    assert shown.returncode == 1
    assert f"{NCCL} is a directory" in shown.stdout + shown.stderr, shown.stdout + shown.stderr
    for _ in range(2):
        done = fleet.sparkbase("apply", "--limit", "spark2", "--yes", "--json")
        assert done.returncode == 1, done.stdout + done.stderr[-3000:]
        node = _report(done)
        assert node["status"] == "failed", node
        assert f"{NCCL} is a directory" in node["message"] and "nothing was written" in node["message"]
        assert "Traceback" not in done.stderr
        assert fleet.sh("spark2", f"ls -lA --time-style=+%s {NCCL}; cat {NCCL}/inside") == before
        assert NCCL not in _owned(fleet, "spark2")


def test_a_symlinked_target_shows_as_a_link_and_is_refused(fleet: Fleet) -> None:
    # KEY=value, as a credentials or .env file holds: the old audit showed it as NCCL settings
    fleet.sh("spark3", f"printf 'TOKEN={SECRET}\\n' > {SECRET_FILE} && chmod 600 {SECRET_FILE} "
                       f"&& ln -s {SECRET_FILE} {NCCL}")
    before = _identity(fleet, "spark3", SECRET_FILE)
    link = f"{NCCL} is a symbolic link to '{SECRET_FILE}'"
    for extra in ((), ("--json",)):
        shown = fleet.sparkbase("plan", "--limit", "spark3", *extra)
        assert shown.returncode == 1, shown.stdout + shown.stderr
        assert SECRET not in shown.stdout + shown.stderr
        assert link in shown.stdout + shown.stderr, shown.stdout + shown.stderr
    done = fleet.sparkbase("apply", "--limit", "spark3", "--yes", "--json")
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert SECRET not in done.stdout + done.stderr
    assert link in _report(done)["message"]
    assert fleet.sh("spark3", f"readlink {NCCL}").strip() == SECRET_FILE
    assert _identity(fleet, "spark3", SECRET_FILE) == before
    assert fleet.sh("spark3", f"cat {SECRET_FILE}") == f"TOKEN={SECRET}\n"
    for fmt in ("table", "json"):
        audit = fleet.sparkbase("audit", "--baseline", "site-stock-6.17-4k", "--limit", "spark3",
                                "--format", fmt)
        assert audit.returncode == 1, audit.stdout[-2000:] + audit.stderr[-2000:]
        assert SECRET not in audit.stdout + audit.stderr
    assert f"a symbolic link to '{SECRET_FILE}'" in audit.stdout, audit.stdout[-3000:]
    assert NCCL not in _owned(fleet, "spark3")
