"""`lane switch`: the one .env line rewritten through the gate, the rest byte-for-byte, its
owner, group and mode kept, a link refused; under the switch lock and apply's node locks;
the .env written first and the switch recorded after.

The CLI cases run with no fleet: the pre-flight is stubbed, and so is the node lock taken
over SSH (`offline`); the local locks and the switch lock are the real ones. The node lock
over SSH is exercised on the emulated fleet (tests/e2e/test_hardening_switch.py).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkbase.deploy.locks import LANE_SWITCH, LockHeld, Owner, file_lock, local_lock_dir, local_locks
from sparkbase.gate.proxy_env import ProxyEnvError, active_lane, rewritten, switch_line, switch_lock_path
from sparkbase.transport import SshTarget

ENV = b"# proxy\r\nPORT=8080\nexport SERVING_LANE=\"glm-fp8\"  \nOTHER=x\n"

REWRITES = [  # (.env bytes, the bytes after switching to dsv41-flash)
    (ENV, b"# proxy\r\nPORT=8080\nexport SERVING_LANE=dsv41-flash\nOTHER=x\n"),
    (b"SERVING_LANE=glm-fp8", b"SERVING_LANE=dsv41-flash"),
    (b"A=1\n  SERVING_LANE = glm-fp8\r\n", b"A=1\n  SERVING_LANE =dsv41-flash\r\n"),
]


@pytest.mark.parametrize(("before", "after"), REWRITES)
def test_rewrite_keeps_every_other_byte(before: bytes, after: bytes) -> None:
    assert rewritten(before, "SERVING_LANE", "dsv41-flash", Path(".env")) == after


def test_active_lane_reads_quoted_values() -> None:
    assert active_lane(ENV, "SERVING_LANE", Path(".env")) == "glm-fp8"


@pytest.mark.parametrize("data", [b"PORT=1\n", b"SERVING_LANE=a\nSERVING_LANE=b\n", b"XSERVING_LANE=a\n"])
def test_missing_or_repeated_key_is_refused(data: bytes) -> None:
    with pytest.raises(ProxyEnvError):
        rewritten(data, "SERVING_LANE", "x", Path(".env"))


def _site_with_env(tmp_path: Path, make_site: object) -> tuple[Path, Path]:
    site = make_site(tmp_path / "site")  # type: ignore[operator]
    env = tmp_path / "proxy.env"
    env.write_bytes(ENV)
    return site, env


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """No fleet: every node is a target that is never dialled, and the node lock over SSH
    is recorded (the nodes it was asked for) instead of taken."""
    from sparkbase.cli import lane
    from sparkbase.gate import switch

    asked: list[list[str]] = []

    def targets(_args: object, site: Any) -> dict[str, SshTarget]:
        return {node: SshTarget(node, node, None, Path("/nonexistent"), "root", False, 1.0)
                for node in site.inventory.nodes}

    @contextlib.contextmanager
    def node_locks(nodes: dict[str, SshTarget], _owner: Owner, _note: object) -> Iterator[None]:
        asked.append(sorted(nodes))
        yield

    monkeypatch.setattr(lane, "_targets", targets)
    monkeypatch.setattr(switch, "node_locks", node_locks)
    return asked


def _switch(site: Path, env: Path, lane: str = "dsv41-flash", *extra: str) -> int:
    from sparkbase.cli.main import main

    return main(["lane", "switch", lane, "--site", str(site), "--env-file", str(env), *extra])


def _qualified(monkeypatch: pytest.MonkeyPatch, during: Callable[[], None] = lambda: None) -> None:
    """The pre-flight qualifies the lane (after running `during`, while the switch holds its locks)."""
    from sparkbase.cli import lane

    def preflight(*_args: object) -> tuple[list[str], bool]:
        during()
        return [], False

    monkeypatch.setattr(lane, "_preflight_lines", preflight)


def _records(site: Path) -> list[dict[str, Any]]:
    log = site / ".sparkbase" / "overrides.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_refused_switch_leaves_env_untouched(tmp_path: Path, make_site: object,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from sparkbase.cli import lane
    from sparkbase.cli.main import main

    site, env = _site_with_env(tmp_path, make_site)
    monkeypatch.setattr(lane, "_preflight_lines", lambda *_: (["spark2: runtime.nccl_env: pid 7"], False))
    code = main(["lane", "switch", "dsv41-flash", "--site", str(site), "--env-file", str(env)])
    assert code == 1
    assert env.read_bytes() == ENV
    assert "REFUSED" in capsys.readouterr().out
    assert not (site / ".sparkbase" / "overrides.log").exists()


def test_switch_and_override_are_recorded(tmp_path: Path, make_site: object,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkbase.cli import lane
    from sparkbase.cli.main import main

    site, env = _site_with_env(tmp_path, make_site)
    monkeypatch.setattr(lane, "_preflight_lines", lambda *_: ([], False))
    assert main(["lane", "switch", "dsv41-flash", "--site", str(site), "--env-file", str(env)]) == 0
    assert env.read_bytes() == REWRITES[0][1]
    monkeypatch.setattr(lane, "_preflight_lines", lambda *_: (["spark1: runtime.cgroup: pid 9"], False))
    args = ["lane", "switch", "glm-nvfp4", "--site", str(site), "--env-file", str(env)]
    assert main([*args, "--override", "maintenance window"]) == 0
    assert b"SERVING_LANE=glm-nvfp4\n" in env.read_bytes()
    records = [json.loads(line) for line in (site / ".sparkbase" / "overrides.log").read_text().splitlines()]
    assert [r["kind"] for r in records] == ["lane-switch", "lane-switch"]
    assert [(r["from"], r["lane"], r["reason"]) for r in records] == [
        ("glm-fp8", "dsv41-flash", "pre-flight qualified"),
        ("dsv41-flash", "glm-nvfp4", "maintenance window"),
    ]
    assert {r["format"] for r in records} == {3}
    assert records[1]["refusals"] == ["spark1: runtime.cgroup: pid 9"]


def test_disabled_lane_is_never_switched_to(tmp_path: Path, make_site: object,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkbase.cli import lane
    from sparkbase.cli.main import main

    site, env = _site_with_env(tmp_path, make_site)
    monkeypatch.setattr(lane, "_preflight_lines", lambda *_: (["lane: lane ds41f-ring4 is disabled"], True))
    args = ["lane", "switch", "ds41f-ring4", "--site", str(site), "--env-file", str(env), "--override", "try"]
    assert main(args) == 1
    assert env.read_bytes() == ENV


# --- owner, group and mode; a linked .env --------------------------------------------------------


def test_the_env_keeps_its_owner_group_and_mode(tmp_path: Path) -> None:
    """The proxy runs as its own user: a switch run as root must not make the .env root's."""
    if os.geteuid() != 0:
        pytest.fail("keeping another user's ownership needs root: run this test as root")
    env = tmp_path / "proxy.env"
    env.write_bytes(ENV)
    os.chown(env, 4321, 4322)
    env.chmod(0o640)
    assert switch_line(env, "SERVING_LANE", "dsv41-flash") == "glm-fp8"
    info = env.stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o7777) == (4321, 4322, 0o640)
    assert env.read_bytes() == REWRITES[0][1]


def test_a_linked_env_is_refused_naming_the_link_and_its_target(tmp_path: Path) -> None:
    real = tmp_path / "proxy" / "real.env"
    real.parent.mkdir()
    real.write_bytes(ENV)
    link = tmp_path / "proxy.env"
    link.symlink_to(real)
    with pytest.raises(ProxyEnvError) as refused:
        switch_line(link, "SERVING_LANE", "dsv41-flash")
    said = str(refused.value)
    assert said.startswith(f"{link}: is a symbolic link to {real}; refused, nothing was changed")
    assert f"point proxy.env_file or --env-file at {real}" in said
    assert link.is_symlink() and real.read_bytes() == ENV
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proxy", "proxy.env"]  # no temp file left


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_an_env_that_is_no_regular_file_is_refused_without_waiting(tmp_path: Path, kind: str) -> None:
    env = tmp_path / "proxy.env"
    os.mkfifo(env) if kind == "fifo" else env.mkdir()
    with pytest.raises(ProxyEnvError, match=r"proxy\.env: (not a regular file|cannot read)"):
        switch_line(env, "SERVING_LANE", "dsv41-flash")


def test_the_cli_refuses_a_linked_env_and_records_nothing(tmp_path: Path, make_site: object,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    site, real = _site_with_env(tmp_path, make_site)
    link = tmp_path / "link.env"
    link.symlink_to(real)
    from sparkbase.cli import lane

    def preflight(*_args: object) -> None:
        raise AssertionError("a linked .env is refused before the pre-flight")

    monkeypatch.setattr(lane, "_preflight_lines", preflight)
    assert _switch(site, link) == 2
    err = capsys.readouterr().err
    assert f"{link}: is a symbolic link to {real}" in err and "nothing recorded" in err
    assert link.is_symlink() and real.read_bytes() == ENV
    assert _records(site) == []


def test_the_cli_help_says_what_it_does_with_a_linked_env(capsys: pytest.CaptureFixture[str]) -> None:
    from sparkbase.cli.main import main

    with pytest.raises(SystemExit):
        main(["lane", "switch", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "A .env that is a symbolic link is refused (exit 2), naming its target" in out
    assert "the atomic rename would replace the link" in out


# --- write first, record after ---------------------------------------------------------------------


def _failing(monkeypatch: pytest.MonkeyPatch, name: str, where: Path, error: int) -> None:
    """`os.NAME` fails with `error` when it writes to `where` (a full disk under that file only)."""
    real = getattr(os, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        first = args[1] if name == "replace" else args[0]
        path = Path(first) if name == "replace" else Path(os.readlink(f"/proc/self/fd/{first}"))
        if path == where:
            raise OSError(error, os.strerror(error))
        return real(*args, **kwargs)

    monkeypatch.setattr(os, name, call)


def test_a_failed_env_write_records_nothing(tmp_path: Path, make_site: object,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    site, env = _site_with_env(tmp_path, make_site)
    _qualified(monkeypatch)
    _failing(monkeypatch, "replace", env, errno.ENOSPC)
    assert _switch(site, env) == 1
    err = capsys.readouterr().err
    assert "cannot rewrite the proxy's .env: No space left on device; it was left as it was" in err
    assert "not done" in err and "nothing recorded" in err
    assert env.read_bytes() == ENV
    assert _records(site) == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


def test_a_record_that_fails_after_the_write_says_the_switch_happened(
    tmp_path: Path, make_site: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    site, env = _site_with_env(tmp_path, make_site)
    log = site / ".sparkbase" / "overrides.log"
    _qualified(monkeypatch)
    _failing(monkeypatch, "write", log, errno.ENOSPC)
    assert _switch(site, env) == 1
    captured = capsys.readouterr()
    assert "done" not in captured.out
    assert (f"{env} now names dsv41-flash (it named glm-fp8), but the switch was NOT recorded in {log}: "
            f"{log}: cannot write the override log: No space left on device") in captured.err
    assert ("lane switch glm-fp8 -> dsv41-flash: DONE BUT NOT RECORDED: the proxy now serves dsv41-flash; "
            "record this switch by hand") in captured.err
    assert env.read_bytes() == REWRITES[0][1]
    assert _records(site) == []


def test_a_log_that_cannot_be_used_refuses_before_the_env_is_touched(
    tmp_path: Path, make_site: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    site, env = _site_with_env(tmp_path, make_site)
    (site / ".sparkbase").mkdir()
    (site / ".sparkbase" / "overrides.log").symlink_to(tmp_path / "elsewhere.log")
    _qualified(monkeypatch)
    assert _switch(site, env) == 1
    assert "cannot open the override log safely" in capsys.readouterr().err
    assert env.read_bytes() == ENV and not (tmp_path / "elsewhere.log").exists()


def test_the_record_names_the_lane_the_env_named_when_it_was_written(
    tmp_path: Path, make_site: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read under the lock, not before it: a switch that landed in between is the `from`."""
    site, env = _site_with_env(tmp_path, make_site)

    def landed() -> None:  # while this switch's pre-flight runs, the .env names another lane
        if b"glm-nvfp4" not in env.read_bytes():
            env.write_bytes(rewritten(env.read_bytes(), "SERVING_LANE", "glm-nvfp4", env))

    _qualified(monkeypatch, landed)
    assert _switch(site, env) == 0
    assert [(r["from"], r["lane"]) for r in _records(site)] == [("glm-nvfp4", "dsv41-flash")]


# --- locks: apply's, and the switch's own ------------------------------------------------------------

HOLDER = Owner(user="ops", host="admin1", pid=4242, started="2026-12-01T04:00:00+00:00", token="t1")


def test_a_switch_refuses_while_an_apply_holds_a_node_of_the_lane(
    tmp_path: Path, make_site: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    site, env = _site_with_env(tmp_path, make_site)
    _qualified(monkeypatch)
    with local_locks(local_lock_dir(site), ["spark3"], HOLDER):
        assert _switch(site, env) == 1
    out = capsys.readouterr().out
    assert ("lane switch glm-fp8 -> dsv41-flash: REFUSED: spark3: another apply holds the local lock "
            "(ops@admin1 pid 4242 since 2026-12-01T04:00:00+00:00); refusing;") in out
    assert env.read_bytes() == ENV and _records(site) == []
    assert _switch(site, env) == 0  # the apply is done: every lock the refused switch took was given back


def test_an_apply_cannot_start_on_a_node_of_the_lane_while_the_switch_runs(
    tmp_path: Path, make_site: object, monkeypatch: pytest.MonkeyPatch, offline: list[list[str]]
) -> None:
    site, env = _site_with_env(tmp_path, make_site)
    refused: list[str] = []

    def apply_starts() -> None:
        with pytest.raises(LockHeld) as held:
            local_locks(local_lock_dir(site), ["spark2"], Owner()).__enter__()
        refused.append(str(held.value))

    _qualified(monkeypatch, apply_starts)
    assert _switch(site, env) == 0
    assert len(refused) == 1
    assert refused[0].startswith("spark2: another lane switch holds the local lock (")
    assert f" pid {os.getpid()} since " in refused[0]
    assert offline == [["spark1", "spark2", "spark3", "spark4"]]  # the node locks of the lane's nodes
    with local_locks(local_lock_dir(site), ["spark2"], Owner()):  # and given back after
        pass


def test_a_second_switch_refuses_naming_the_first(
    tmp_path: Path, make_site: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    site, env = _site_with_env(tmp_path, make_site)
    first = Owner(user="ops", host="admin1", pid=4242, started="2026-12-01T04:00:00+00:00",
                  command=LANE_SWITCH)
    _qualified(monkeypatch)
    with file_lock(switch_lock_path(env), first, str(env), "switch"):
        assert _switch(site, env) == 1
    out = capsys.readouterr().out
    assert (f"REFUSED: {env}: another lane switch holds the switch lock (ops@admin1 pid 4242 since "
            "2026-12-01T04:00:00+00:00); refusing;") in out
    assert env.read_bytes() == ENV and _records(site) == []
    assert switch_lock_path(env) == tmp_path / ".proxy.env.sparkbase-switch.lock"


def test_a_link_planted_at_the_switch_lock_is_refused_not_written_through(
    tmp_path: Path, make_site: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    site, env = _site_with_env(tmp_path, make_site)
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    switch_lock_path(env).symlink_to(victim)
    _qualified(monkeypatch)
    assert _switch(site, env) == 1
    assert "cannot take the switch's locks" in capsys.readouterr().err
    assert victim.read_text() == "keep me\n" and env.read_bytes() == ENV and _records(site) == []
