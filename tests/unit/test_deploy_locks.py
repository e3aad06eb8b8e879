"""The local apply lock (filelock): one holder per node, all or none, the holder named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbase.deploy.locks import LockHeld, Owner, local_locks

HOLDER = Owner(user="ops", host="admin1", pid=4242, started="2026-12-01T04:00:00+00:00", token="t1")


def _take(directory: Path, nodes: list[str]) -> None:
    """Take and give back the locks, as a second run would."""
    with local_locks(directory, nodes, Owner()):
        pass


def test_a_held_lock_refuses_a_second_run_and_names_the_holder(tmp_path: Path) -> None:
    with local_locks(tmp_path, ["spark1"], HOLDER):
        with pytest.raises(LockHeld, match=r"spark1: another apply holds the local lock "
                                           r"\(ops@admin1 pid 4242 since 2026-12-01T04:00:00"):
            _take(tmp_path, ["spark1"])
        # the refused attempt opened the file too: the holder's record is still whole
        assert json.loads((tmp_path / "spark1.lock").read_text())["token"] == "t1"
    with local_locks(tmp_path, ["spark1"], Owner(token="t2")):
        assert json.loads((tmp_path / "spark1.lock").read_text())["token"] == "t2"


def test_all_or_none_a_node_held_elsewhere_releases_the_ones_taken(tmp_path: Path) -> None:
    with local_locks(tmp_path, ["spark2"], HOLDER):
        with pytest.raises(LockHeld, match="spark2"):
            _take(tmp_path, ["spark1", "spark2", "spark3"])
        _take(tmp_path, ["spark1"])  # spark1 was given back
        assert not (tmp_path / "spark3.lock").exists()  # never reached


def test_the_record_carries_its_format_and_the_lock_file_stays(tmp_path: Path) -> None:
    with local_locks(tmp_path / "locks", ["spark1"], HOLDER):
        record = json.loads((tmp_path / "locks" / "spark1.lock").read_text())
    assert record == {**HOLDER.record(), "format": 2, "command": "apply"}
    assert (tmp_path / "locks" / "spark1.lock").is_file()  # waiters share one inode


def test_an_unreadable_holder_record_is_an_unknown_owner(tmp_path: Path) -> None:
    (tmp_path / "spark1.lock").write_text("x" * 10_000)  # not an owner record

    def scribble(fd: int) -> None:
        pass

    from filelock import UnixFileLock

    with (UnixFileLock(tmp_path / "spark1.lock", blocking=False, on_acquired=scribble),
          pytest.raises(LockHeld, match=r"local lock \(owner unknown\)")):
        _take(tmp_path, ["spark1"])
