"""The local lock (filelock): one holder per node, all or none, the holder and its command named;
the node lock's acquire, refuse and stale-break decisions over a fake node."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sparkbase.deploy.locks import (
    ACQUIRED,
    HELD,
    LANE_SWITCH,
    LockHeld,
    Owner,
    acquire_node_lock,
    local_locks,
    parse_acquire,
)

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


def test_a_lock_held_by_a_lane_switch_says_so() -> None:
    switch = Owner(user="ops", host="admin1", pid=7, started="2026-12-01T04:00:00+00:00", command=LANE_SWITCH)
    with pytest.raises(LockHeld, match=r"^spark1: another lane switch holds the node lock \(ops@admin1"):
        parse_acquire("spark1", [HELD, switch.json()])
    older = {k: v for k, v in HOLDER.record().items() if k != "command"}  # a record of format 1
    with pytest.raises(LockHeld, match=r"^spark1: another apply holds the node lock \(ops@admin1 pid 4242 "):
        parse_acquire("spark1", [HELD, json.dumps(older)])


class FakeNode:
    """A node's lock directory, answering the acquire/break commands as the shell would."""

    def __init__(self, owner: dict[str, Any] | None) -> None:
        self.owner = owner
        self.commands: list[str] = []

    def run(self, command: str) -> list[str]:
        self.commands.append(command)
        if command.startswith("if grep"):  # remote_break_command
            self.owner = None
            return []
        if self.owner is None:
            self.owner = json.loads(command.split("printf '%s\\n' '", 1)[1].split("'", 1)[0])
            return [ACQUIRED]
        return [HELD, json.dumps(self.owner)]


def test_acquire_takes_a_free_node_lock() -> None:
    node = FakeNode(None)
    acquire_node_lock("spark1", node.run, HOLDER, lambda _line: None)
    assert node.owner is not None and node.owner["token"] == "t1"


def test_acquire_refuses_a_live_holder_and_leaves_it() -> None:
    other = Owner(user="ops", host="elsewhere", pid=99, command=LANE_SWITCH).record()
    node = FakeNode(other)
    with pytest.raises(LockHeld, match="another lane switch holds the node lock"):
        acquire_node_lock("spark1", node.run, HOLDER, lambda _line: None)
    assert node.owner == other and len(node.commands) == 1


def test_acquire_breaks_a_stale_lock_of_this_machine_and_says_so() -> None:
    dead = Owner(pid=_exited_pid(), token="old").record()
    notes: list[str] = []
    node = FakeNode(dead)
    acquire_node_lock("spark1", node.run, HOLDER, notes.append)
    assert node.owner is not None and node.owner["token"] == "t1"
    assert len(notes) == 1 and notes[0].startswith("spark1: breaking a stale node lock (")


def _exited_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid
