"""`Lab.clone`: a down lab's node disks copied into a new lab that boots on its own ports and
shares nothing with its source (the e2e tier's converged image relies on it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fleets import require_root
from ports import port_base

from sparkbase_lab.fleet import Lab, LabError

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_LAB_CLONE_PORT_BASE", 2471)
NODE = "spark1"


def ok(lab: Lab, command: str) -> str:
    rc, out, err = lab.run(NODE, command)
    assert rc == 0, f"{command!r} -> {rc}\n{out}\n{err}"
    return out


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A one-node lab, changed (a file added, a machine file deleted: an overlay whiteout), down."""
    require_root()
    lab = Lab(tmp_path_factory.mktemp("clone-source") / "lab", port_base=PORT_BASE)
    lab.up(1, fresh=True)
    try:
        ok(lab, "echo converged > /root/mark && rm /etc/sysctl.conf && test -e /swap.img")
    finally:
        lab.down()
    yield lab
    lab.down()


def test_a_clone_boots_with_the_source_disk_on_its_own_ports(source: Lab, tmp_path: Path) -> None:
    clone = source.clone(tmp_path / "clone", port_base=PORT_BASE + 1)
    clone.up(1)
    try:
        assert clone.port(NODE) == PORT_BASE + 1
        assert ok(clone, "cat /root/mark") == "converged\n"
        assert clone.run(NODE, "test -e /etc/sysctl.conf")[0] == 1, "the whiteout was copied"
        assert ok(clone, "hostname") == f"{NODE}\n"
        ok(clone, "echo clone > /root/mark && touch /root/only-in-clone")
    finally:
        clone.down()
    swap = clone.node_dir(NODE) / "upper" / "swap.img"
    assert swap.stat().st_blocks * 512 < 1 << 20, "sparse files stay sparse"
    assert (source.node_dir(NODE) / "upper/root/mark").read_text() == "converged\n"
    assert not (source.node_dir(NODE) / "upper/root/only-in-clone").exists()


def test_the_source_still_boots_unchanged_after_a_clone_ran(source: Lab, tmp_path: Path) -> None:
    clone = source.clone(tmp_path / "clone", port_base=PORT_BASE + 1)
    clone.up(1)
    ok(clone, "rm /root/mark")
    clone.down()
    source.up(1)
    try:
        assert ok(source, "cat /root/mark") == "converged\n"
    finally:
        source.down()


def test_clone_refuses_a_running_source_and_a_used_directory(source: Lab, tmp_path: Path) -> None:
    source.up(1)
    try:
        with pytest.raises(LabError, match="is up"):
            source.clone(tmp_path / "clone", port_base=PORT_BASE + 1)
    finally:
        source.down()
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "file").write_text("mine\n")
    with pytest.raises(LabError, match="not empty"):
        source.clone(tmp_path / "used", port_base=PORT_BASE + 1)
    assert (tmp_path / "used" / "file").read_text() == "mine\n"
    with pytest.raises(LabError, match="no disk"):
        Lab(tmp_path / "empty").clone(tmp_path / "clone", port_base=PORT_BASE + 1)
