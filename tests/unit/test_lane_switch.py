"""`lane switch`: the one .env line rewritten through the gate, the rest byte-for-byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbase.gate.proxy_env import ProxyEnvError, active_lane, rewritten

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
