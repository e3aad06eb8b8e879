"""`sparkbase qualify` on a copy of the shipped site, the lane's engine, restarter and guard
faked (the session itself is tested in test_qualify_run.py, the lab in tests/e2e): the JSON
contract, the first release and the next, a failure that records nothing, and every bad
input refused with exit 2 before anything runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_qualify_run import Engine, Restarter

from sparkbase.cli import qualify as qualify_cli
from sparkbase.cli.main import main
from sparkbase.qualify.client import ApiEndpoint
from sparkbase.qualify.run import Plan, World

LANE = "dsv41-flash"
#: the --json document's keys (format 1): a contract; a change here is a format bump
KEYS = {"format", "lane", "status", "verdict", "release", "against", "prompt_set", "reasons", "notes",
        "changes", "model", "runs", "comparisons", "elapsed_seconds"}
RUN_KEYS = {"label", "runs_as", "requests", "decode_tokens_per_second", "ttft_seconds"}
COMPARISON_KEYS = {"figure", "higher_is_better", "verdict", "difference", "drift", "bar"}
CHANGE_KEYS = {"prompt", "what", "position", "before", "after", "line"}


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Engine:
    """The lane's engine, faked: `_session` builds the real plan, the world reaches the fake."""
    fake = Engine(speed={"lane-dsv41-flash.service": 50.0}, spread=0.0)  # exact: no statistical luck
    real_session = qualify_cli._session

    def session(site: Any, args: Any, prompts: Any, previous: Any, previous_lane: Any,
                lab: Any) -> tuple[Plan, World]:
        monkeypatch.setattr("sparkbase.cli.qualify.ssh_targets", lambda *_a: {})
        monkeypatch.setattr("sparkbase.cli.qualify.lane_guard", lambda *_a: None)
        monkeypatch.setattr("sparkbase.cli.qualify.restarter_for", lambda *_a: Restarter(fake))
        monkeypatch.setattr("sparkbase.cli.qualify.api_endpoint",
                            lambda *_a: ApiEndpoint("spark1", "127.0.0.1", 1))
        plan, world = real_session(site, args, prompts, previous, previous_lane, lab)
        fake.running = str(plan.candidate.runtime.unit) if plan.candidate.runtime else ""
        world.guard, world.gate = (lambda _when: None), (lambda _before: [])
        world.complete, world.complete_once = fake.complete, fake.complete_once
        world.served_model = lambda _e, _t: "deepseek-ai/DeepSeek-V4.1-Flash-1017"
        return plan, world

    monkeypatch.setattr(qualify_cli, "_session", session)
    return fake


def qualify(site: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    code = main(["qualify", LANE, "--site", str(site), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_the_first_release_then_the_next_against_it(site_copy: Path, engine: Engine,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, first = qualify(site_copy, capsys)
    assert code == 0 and set(first) == KEYS and first["format"] == 1
    assert (first["status"], first["release"], first["against"]) == ("qualified", "r1", None)
    assert first["verdict"] is None
    assert first["prompt_set"]["name"] == "sparkbase-v1"
    assert first["prompt_set"]["source"] == "shipped:v1.yaml"
    (run,) = first["runs"]
    assert set(run) == RUN_KEYS and run["requests"] == 16 and first["comparisons"] == []
    record = json.loads((site_copy / "releases" / LANE / "r1" / "release.json").read_text())
    assert record["qualification"]["determinism"] == "first release"
    assert record["baseline"]["name"] == "site-stock-6.17-4k" and "@" in record["who"]
    assert record["settings"]["runtime"] == {"unit": "lane-dsv41-flash.service", "container": None}

    code, second = qualify(site_copy, capsys)
    assert code == 0, second["reasons"]
    assert (second["status"], second["release"], second["against"]) == ("qualified", "r2", "r1")
    assert second["verdict"] == "no difference" and [r["label"] for r in second["runs"]] == ["A", "B", "A'"]
    assert all(set(c) == COMPARISON_KEYS for c in second["comparisons"])
    assert {"value", "low", "high"} == set(second["comparisons"][0]["difference"])
    assert "B runs as A does" in second["notes"][0]


def test_a_changed_completion_fails_names_the_prompt_and_records_nothing(
        site_copy: Path, engine: Engine, capsys: pytest.CaptureFixture[str]) -> None:
    assert qualify(site_copy, capsys)[0] == 0
    engine.changes = {"lane-dsv41-flash.service": "The capital of France is"}
    code, result = qualify(site_copy, capsys)
    assert (code, result["status"], result["release"]) == (1, "failed", None)
    (change,) = result["changes"]
    assert set(change) == CHANGE_KEYS and change["prompt"] == "p01-capital" and change["what"] == "token"
    assert change["line"].startswith("prompt p01-capital: first differs at token 3")
    kept = (site_copy / "releases" / LANE).iterdir()
    assert sorted(p.name for p in kept if not p.name.startswith(".")) == ["r1"]


def test_the_text_output_says_what_was_recorded(site_copy: Path, engine: Engine,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["qualify", LANE, "--site", str(site_copy), "--release", "2026-10-27"]) == 0
    out = capsys.readouterr().out
    assert "first release (determinism only)" in out
    assert f"qualify {LANE}: QUALIFIED; recorded releases/{LANE}/2026-10-27" in out


OTHER_SET = """\
format: 1
name: other
sampling: {temperature: 0, seed: 1, max_tokens: 8}
warmup: {requests: 0, prompt: w}
prompts: [{id: a, text: one}, {id: b, text: two}]
"""


@pytest.mark.parametrize(("extra", "said"), [
    (["--lane-is-not-an-option"], None),
    (["--against", "r9"], "lane dsv41-flash has no release r9 (releases: r1)"),
    (["--release", "r1"], "releases/dsv41-flash/r1 exists; a release is never rewritten"),
    (["--release", ".hidden"], "--release .hidden: use letters"),
    (["--time-limit", "0"], "--time-limit 0: give minutes"),
    (["--prompts", "{other}"], "release r1 was qualified with prompt set sparkbase-v1"),
    (["--prompts", "{broken}"], "prompts.yaml:1:1: format: required field is missing"),
])
def test_bad_input_is_refused_with_exit_2_before_anything_runs(
        site_copy: Path, engine: Engine, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        extra: list[str], said: str | None) -> None:
    assert qualify(site_copy, capsys)[0] == 0
    (tmp_path / "other.yaml").write_text(OTHER_SET)
    (tmp_path / "prompts.yaml").write_text("name: x\n")
    args = [a.format(other=tmp_path / "other.yaml", broken=tmp_path / "prompts.yaml") for a in extra]
    engine.log.clear()
    assert exit_status(["qualify", LANE, "--site", str(site_copy), *args]) == 2
    if said is not None:
        assert said in capsys.readouterr().err
    assert engine.log == []  # nothing was asked of the lane


def test_an_unknown_lane_is_exit_2(site_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_status(["qualify", "nope", "--site", str(site_copy)]) == 2
    assert "no lane nope" in capsys.readouterr().err


def exit_status(argv: list[str]) -> int:
    """The command's exit status, whether it returns it or exits with it."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize(("text", "lab", "reached"), [
    ("10.69.43.170:8000", False, ("10.69.43.170", 8000)),
    ("[fd00::1]:30000", False, ("fd00::1", 30000)),
    ("127.0.0.1:2601", True, ("127.0.0.1", 2601)),
])
def test_an_endpoint_given_on_the_command_line(text: str, lab: bool, reached: tuple[str, int]) -> None:
    endpoint = qualify_cli.given_endpoint(text, lab)
    assert (endpoint.host, endpoint.port) == reached


@pytest.mark.parametrize(("text", "lab", "said"), [
    ("spark1", False, "give HOST:PORT"),
    ("spark1:http", False, "give HOST:PORT"),
    ("10.69.43.170:8000", True, "the lab answers on 127.0.0.0/8 only"),
])
def test_a_bad_endpoint_is_exit_2(text: str, lab: bool, said: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        qualify_cli.given_endpoint(text, lab)
    assert refused.value.code == 2 and said in capsys.readouterr().err
