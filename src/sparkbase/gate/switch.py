"""`lane switch` safe against overlapping runs: the locks it holds, the write, then the record.

- `switch_locks`: held through the pre-flight and the write, taken in this order, each all
  or none and non-blocking (a lock held elsewhere refuses at once, naming its holder):
  1. the switch lock beside the `.env` (`proxy_env.switch_lock_path`): one switch of that
     `.env` at a time, from any site copy on this machine;
  2. apply's local lock of every node of the lane (`<site>/.sparkbase/locks/<node>.lock`);
  3. apply's node lock on every node of the lane (`/run/sparkbase/apply.lock`, over SSH):
     an apply from another machine is seen too, and an apply cannot start moving a node of
     the lane (to another kernel, say) while the proxy is being pointed at it. A node that
     cannot be reached for its lock refuses the switch (an apply may be rebooting it).
- `write_then_record`: the override log is opened first (a log that cannot be used refuses
  before anything changes), then the `.env` is written, then the record is appended: a
  failed write records nothing; a record that fails after the write raises
  `SwitchNotRecorded` (the switch happened; the caller must say so loudly).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbase.deploy.locks import Owner, file_lock, local_locks, node_locks
from sparkbase.gate.proxy_env import switch_line, switch_lock_path
from sparkbase.policy.overrides import OverrideLogError, OverrideRecord, open_log

if TYPE_CHECKING:
    from sparkbase.transport import SshTarget


class SwitchNotRecorded(Exception):
    """The `.env` was switched but the override log could not record it."""

    def __init__(self, env: Path, before: str, lane: str, log: Path, why: OverrideLogError) -> None:
        self.env = env
        self.before = before
        self.lane = lane
        self.log = log
        super().__init__(f"{env} now names {lane} (it named {before}), but the switch was NOT recorded "
                         f"in {log}: {why}")


@contextlib.contextmanager
def switch_locks(env: Path, lock_dir: Path, targets: Mapping[str, SshTarget], owner: Owner,
                 note: Callable[[str], None]) -> Iterator[None]:
    """Hold the switch lock of `env`, then the local and node locks of every node of
    `targets` (the lane's), until the block ends; `LockHeld` names a holder, `NodeLockError`
    a node that could not be asked, `OSError` a lock file that cannot be used (a link)."""
    with (file_lock(switch_lock_path(env), owner, str(env), "switch"),
          local_locks(lock_dir, sorted(targets), owner),
          node_locks(targets, owner, note)):
        yield


def write_then_record(env: Path, key: str, lane: str, log: Path,
                      record_for: Callable[[str], OverrideRecord]) -> OverrideRecord:
    """Point `env`'s `KEY=` line at `lane`, then append `record_for(lane it named before)` to
    `log`. `OverrideLogError` or `ProxyEnvError`: nothing changed, nothing recorded;
    `SwitchNotRecorded`: the `.env` was switched, the record failed."""
    with open_log(log) as writer:
        before = switch_line(env, key, lane)
        record = record_for(before)
        try:
            writer.append(record)
        except OverrideLogError as exc:
            raise SwitchNotRecorded(env, before, lane, log, exc) from None
    return record
