"""The qualify session with a fake engine, restarter, guard and gate: the first release on
determinism alone; A, B, A' with restarts and the lane left on the candidate; a changed
completion, a slower and a noisy build, other traffic, the time limit, a refused start."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import pytest

from sparkbase.gate.records import Completion
from sparkbase.model.lanes import Lane
from sparkbase.qualify.client import ApiEndpoint, ApiError, Measured, Request
from sparkbase.qualify.guard import Contamination
from sparkbase.qualify.promptset import PromptSet
from sparkbase.qualify.run import Plan, Status, World, qualify
from sparkbase.qualify.stats import Verdict

PROMPTS = PromptSet.model_validate({
    "format": 1, "name": "t", "sampling": {"temperature": 0, "seed": 1, "max_tokens": 32}, "rounds": 3,
    "warmup": {"requests": 2, "prompt": "warm"},
    "prompts": [{"id": "p1", "text": "one"}, {"id": "p2", "text": "two"}, {"id": "p3", "text": "three"}],
})
ENDPOINT = ApiEndpoint("spark1", "127.0.0.1", 1)


def lane(unit: str) -> Lane:
    return Lane.model_validate({"model": "m", "engine": "sglang", "baseline": "b",
                                "baseline_version": "1.0.0", "shape": "ring4",
                                "nodes": ["spark1", "spark2", "spark3", "spark4"],
                                "runtime": {"unit": unit, "match": ["x"], "metrics": {"port": 1}}})


CANDIDATE, PREVIOUS = lane("next.service"), lane("old.service")


def jitter(*parts: object) -> float:
    """A repeatable value in [-1, 1) from the request (the fake engine's noise)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return digest[0] / 128 - 1


@dataclass
class Engine:
    """A fake lane: each unit is a build with a speed (tokens/s) and a spread; a build may
    answer one prompt differently; every request is logged with the unit that answered."""

    speed: dict[str, float] = field(default_factory=lambda: {"next.service": 50.0, "old.service": 50.0})
    spread: float = 0.5
    changes: dict[str, str] = field(default_factory=dict)  # unit -> prompt it answers differently
    drift: dict[str, list[float]] = field(default_factory=dict)  # unit -> speed factor per start
    running: str = "next.service"
    starts: int = 0
    log: list[tuple[str, str]] = field(default_factory=list)

    def complete(self, _endpoint: ApiEndpoint, request: Request, _left: float) -> Measured:
        self.log.append((self.running, request.prompt))
        factor = self.drift.get(self.running, [1.0] * 10)[self.starts % 10]
        noise = self.spread * jitter(self.running, request.prompt, len(self.log))
        rate = self.speed[self.running] * factor + noise
        ids = tuple(int(b) for b in hashlib.sha256(request.prompt.encode()).digest()[:8])
        if self.changes.get(self.running) == request.prompt:
            ids = (*ids[:3], 999, *ids[4:])
        ttft = 0.1 + 0.002 * self.spread * jitter(request.prompt, len(self.log))
        return Measured(request.prompt, ids, 8, ttft, rate, "length")

    def complete_once(self, _endpoint: ApiEndpoint, request: Request, _left: float) -> object:
        self.log.append((self.running, f"warm:{request.prompt}"))
        return ("", None)


@dataclass
class Restarter:
    engine: Engine
    fail_on: str = ""
    restarts: list[str] = field(default_factory=list)

    def describe(self, lane: Lane) -> str:
        assert lane.runtime is not None
        return f"unit {lane.runtime.unit}"

    def restart(self, running: Lane, wanted: Lane, note: Any, before_start: Any = lambda: None) -> None:
        assert wanted.runtime is not None and running.runtime is not None
        assert self.engine.running in (running.runtime.unit, "")  # told what runs (nothing after a failure)
        self.engine.running = ""  # stopped: the gate judges the hosts with the lane down
        before_start()
        if wanted.runtime.unit == self.fail_on:
            self.engine.running = ""  # stopped, and the other did not start
            raise RuntimeError(f"spark2: systemctl start {self.fail_on}: exit status 5")
        self.restarts.append(str(wanted.runtime.unit))
        self.engine.running = str(wanted.runtime.unit)
        self.engine.starts += 1


def previous_completions(engine: Engine) -> dict[str, Completion]:
    """What release r1 recorded: the old build's answers."""
    saved = engine.running
    engine.running = "old.service"
    found = {p.id: engine.complete(ENDPOINT, Request("m", p.text, 32, 1), 1.0).completion(p.id)
             for p in PROMPTS.prompts}
    engine.running, engine.log = saved, []
    return found


def session(engine: Engine, *, first: bool = False, guard: Any = None, gate: Any = None,
            restarter: Restarter | None = None, limit: float = 3600.0,
            clock: Any = None) -> tuple[Any, Restarter]:
    restarter = restarter or Restarter(engine)
    plan = Plan("lane", CANDIDATE, PROMPTS, limit) if first else Plan(
        "lane", CANDIDATE, PROMPTS, limit, "r1", PREVIOUS, previous_completions(engine))
    world = World(ENDPOINT, guard or (lambda _when: None), gate or (lambda _before: []), restarter,
                  complete=engine.complete, complete_once=engine.complete_once,
                  served_model=lambda _e, _t: "served", sleep=lambda _s: None)
    if clock is not None:
        world.clock = clock
    return qualify(plan, world), restarter


def test_the_first_release_is_qualified_on_determinism_alone() -> None:
    engine = Engine()
    outcome, restarter = session(engine, first=True)
    assert outcome.status is Status.QUALIFIED and outcome.verdict is None and outcome.comparisons == []
    assert restarter.restarts == []  # measured as it runs
    assert sorted(outcome.candidate_completions) == ["p1", "p2", "p3"]
    counted = [p for unit, p in engine.log if not p.startswith("warm:")]
    assert counted == ["one", "two", "three"] * 3  # every prompt, 3 rounds, in order
    assert [p for _u, p in engine.log[:2]] == ["warm:warm", "warm:warm"]  # warm-up first, not counted
    assert len(outcome.runs[0].samples) == 9


def test_an_unchanged_build_is_no_difference_and_the_lane_ends_on_the_candidate() -> None:
    engine = Engine(speed={"next.service": 50.0, "old.service": 50.0})
    outcome, restarter = session(engine)
    assert outcome.status is Status.QUALIFIED, outcome.reasons
    assert outcome.verdict is Verdict.NO_DIFFERENCE
    assert restarter.restarts == ["next.service", "old.service", "next.service"]
    assert engine.running == "next.service"
    assert [r.label for r in outcome.runs] == ["A", "B", "A'"]
    orders = [[p for u, p in engine.log if not p.startswith("warm:")][i * 9:(i + 1) * 9] for i in range(3)]
    assert orders[0] == orders[1] == orders[2]  # the same prompts in the same order in each run
    assert [c.figure for c in outcome.comparisons] == ["decode tokens/s", "time to first token s"]


def test_a_faster_build_is_better() -> None:
    outcome, _ = session(Engine(speed={"next.service": 60.0, "old.service": 50.0}))
    assert (outcome.status, outcome.verdict) == (Status.QUALIFIED, Verdict.BETTER)


def test_a_slower_build_is_worse_and_fails() -> None:
    outcome, _ = session(Engine(speed={"next.service": 40.0, "old.service": 50.0}))
    assert (outcome.status, outcome.verdict) == (Status.FAILED, Verdict.WORSE)
    assert "worse than release r1 (decode tokens/s)" in outcome.reasons[0]


def test_a_noisy_build_that_drifts_between_its_runs_is_unstable() -> None:
    engine = Engine(drift={"next.service": [1.0, 0.7, 1.0, 1.3] + [1.0] * 6})  # start 1 (A) and 3 (A')
    outcome, _ = session(engine)
    assert (outcome.status, outcome.verdict) == (Status.NO_VERDICT, Verdict.UNSTABLE)
    assert "unstable" in outcome.reasons[0]


def test_a_changed_completion_fails_after_run_a_naming_the_prompt() -> None:
    engine = Engine(changes={"next.service": "two"})
    outcome, restarter = session(engine)
    assert outcome.status is Status.FAILED
    assert [c.prompt_id for c in outcome.changes] == ["p2"]
    assert outcome.changes[0].describe().startswith("prompt p2: first differs at token 3")
    assert restarter.restarts == ["next.service"]  # no B: it failed at once
    assert "differ from release r1's" in outcome.reasons[0]


def test_other_traffic_during_b_gives_no_verdict_and_puts_the_candidate_back() -> None:
    engine = Engine()
    calls: list[str] = []

    def guard(when: str) -> Contamination | None:
        calls.append(when)
        busy = engine.running == "old.service" and "prompt p2" in when
        return Contamination(f"other traffic on spark1: 2 running requests ({when})") if busy else None

    outcome, restarter = session(engine, guard=guard)
    assert outcome.status is Status.NO_VERDICT and outcome.verdict is None
    assert outcome.reasons == ["other traffic on spark1: 2 running requests (during run B, before prompt p2 "
                               "round 1)"]
    assert restarter.restarts == ["next.service", "old.service", "next.service"]  # put back
    assert calls[0] == "before run A" and "after run A" in calls  # before, between, after


def test_the_time_limit_ends_the_session_without_a_verdict() -> None:
    ticks = iter(range(10_000))
    outcome, _ = session(Engine(), limit=20.0, clock=lambda: float(next(ticks)))
    assert outcome.status is Status.NO_VERDICT
    assert "the time limit (20 s) ran out" in outcome.reasons[0]


def test_a_refused_start_gives_no_verdict() -> None:
    refusal = ["spark3: kernel.release: expected x"]
    outcome, restarter = session(Engine(), gate=lambda before: refusal if before else [])
    assert outcome.status is Status.NO_VERDICT and restarter.restarts == []
    assert outcome.reasons == ["the gate refused starting run A: spark3: kernel.release: expected x "
                               "(the lane is left stopped: the gate refuses to start it there)"]


def test_a_failed_restart_is_named_and_the_candidate_restored() -> None:
    engine = Engine()
    outcome, _ = session(engine, restarter=Restarter(engine, fail_on="old.service"))
    assert outcome.status is Status.NO_VERDICT
    assert outcome.reasons == ["run B: spark2: systemctl start old.service: exit status 5"]
    assert engine.running == "next.service"


def test_an_endpoint_failure_is_named_with_where() -> None:
    engine = Engine()

    def broken(_e: ApiEndpoint, request: Request, _l: float) -> Measured:
        raise ApiError("http://127.0.0.1:1/v1/completions: connection refused (is the lane serving?)")

    engine.complete = broken  # type: ignore[method-assign,assignment]
    outcome, _ = session(engine, first=True)
    assert outcome.status is Status.NO_VERDICT
    assert outcome.reasons[0].startswith("run A, prompt p1, round 1: http://127.0.0.1:1/v1/completions")


@pytest.mark.parametrize("first", [True, False])
def test_a_build_that_answers_a_prompt_two_ways_fails(first: bool) -> None:
    engine = Engine()
    real = engine.complete

    def flaky(endpoint: ApiEndpoint, request: Request, left: float) -> Measured:
        measured = real(endpoint, request, left)
        if request.prompt == "three" and len(engine.log) % 2 == 0:
            return Measured(measured.text, (1, 2, 3), 3, 0.1, 50.0, "length")
        return measured

    engine.complete = flaky  # type: ignore[method-assign,assignment]
    outcome, _ = session(engine, first=first)
    assert outcome.status is Status.FAILED
    assert outcome.changes and outcome.changes[0].prompt_id.startswith("p3 (round ")


def test_the_unit_restarter_stops_everywhere_then_starts_in_rank_order() -> None:
    from sparkbase.qualify.restart import Ran, RestartError, UnitRestarter

    commands: list[tuple[str, str]] = []

    def run(node: str, script: str, _timeout: float) -> Ran:
        commands.append((node, script))
        failed = Ran(5, "", "Failed to start old.service: Unit old.service not found.")
        return failed if "start old" in script else Ran(0, "", "")

    UnitRestarter(run).restart(PREVIOUS, CANDIDATE, lambda _line: None)
    assert commands == [(f"spark{n}", "systemctl stop old.service") for n in (4, 3, 2, 1)] + \
                       [(f"spark{n}", "systemctl start next.service") for n in (1, 2, 3, 4)]
    said = (r"^spark1: systemctl start old.service: Failed to start old.service: Unit old.service not "
            r"found\. \(is that release's unit installed")
    with pytest.raises(RestartError, match=said):
        UnitRestarter(run).restart(CANDIDATE, PREVIOUS, lambda _line: None)


def test_a_lane_no_restarter_here_can_restart_is_refused() -> None:
    from sparkbase.qualify.restart import ContainerRestarter, RestartError, UnitRestarter, restarter_for

    def boxed(unit: str | None, digest: str) -> Lane:
        runtime: dict[str, object] = {"match": ["x"], "container": {
            "name": "dsv41-flash", "image": f"aidendle94/sparkrun-sglang-dsv41-gb10@sha256:{digest * 64}"}}
        if unit:
            runtime["unit"] = unit
        return Lane.model_validate({"model": "m", "engine": "sglang", "baseline": "b",
                                    "baseline_version": "1.0.0", "shape": "ring4",
                                    "nodes": ["spark1", "spark2", "spark3", "spark4"], "runtime": runtime})

    assert isinstance(restarter_for([boxed(None, "a"), boxed(None, "b")], {}), ContainerRestarter)
    with pytest.raises(RestartError, match="one release runs as a container alone and another by a unit"):
        restarter_for([boxed(None, "a"), boxed("lane-x.service", "b")], {})
    with pytest.raises(RestartError, match=r"other images under one unit \(lane-x.service\)"):
        restarter_for([boxed("lane-x.service", "a"), boxed("lane-x.service", "b")], {})
    assert isinstance(restarter_for([boxed("lane-x.service", "a"), boxed("lane-y.service", "b")], {}),
                      UnitRestarter)  # a unit that starts its container: each build its own unit
