"""The qualify run: the determinism gate, then candidate / previous / candidate in one session.

`qualify(plan, world)` does, in order:

1. the gate on the lane as it runs (its hosts and processes; the release check itself left
   out: qualifying is what it waits for), and the contamination guard;
2. with no previous release (the lane's first): one run of the candidate as it runs, its
   completions checked against themselves (each prompt's rounds must agree) and kept: the
   first release is recorded on determinism alone;
3. otherwise A, B, A': each run starts with the lane restarted the way it runs (a
   `LaneRestarter`) as the candidate's lane file says (A, A') or the previous release's (B),
   each start through the gate; then warm-up requests that are not counted; then every prompt
   of the set, `rounds` times, in the same order in each run, one request at a time, the
   guard read before, between every two requests and after. After A the candidate's
   completions are compared with the previous release's (any change fails at once, naming
   the prompts and where they first differ), and A' must answer as A did. Then per figure
   (decode tokens/s, time to first token) the verdict of `qualify.stats.compare`;
4. whatever happens after B started, the lane is left running the candidate again.

A bounded total time holds the whole session (`Plan.time_limit_seconds`); every request's own
deadline is cut to what is left. A run that cannot finish (the guard saw other traffic, the
time ran out, the endpoint failed, a restart or the gate refused) gives no verdict.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

from sparkbase.gate.records import Completion, image_digest
from sparkbase.model.lanes import Lane
from sparkbase.qualify import client
from sparkbase.qualify.client import COMPLETION_DEADLINE, ApiEndpoint, ApiError, Measured, Request
from sparkbase.qualify.determinism import Change, changes
from sparkbase.qualify.guard import Contamination
from sparkbase.qualify.promptset import PromptSet
from sparkbase.qualify.restart import LaneRestarter
from sparkbase.qualify.stats import MIN_SAMPLES, Comparison, Verdict, compare

T = TypeVar("T")

#: how long a restarted lane may take to answer /v1/models (a TP4 model loads for minutes)
READY_TIMEOUT = 1800.0
READY_POLL_SECONDS = 2.0


class Status(StrEnum):
    """How a qualify run ended."""

    QUALIFIED = "qualified"
    FAILED = "failed"
    NO_VERDICT = "no verdict"


@dataclass(frozen=True)
class Plan:
    """What to run: the candidate lane, the release it is judged against (None: the first),
    that release's lane file and completions, the prompt set, the time allowed."""

    lane_name: str
    candidate: Lane
    prompts: PromptSet
    time_limit_seconds: float
    previous: str | None = None
    previous_lane: Lane | None = None
    previous_completions: dict[str, Completion] = field(default_factory=dict)


@dataclass
class World:
    """What a run reaches (tests give their own): the endpoint, the guard, the restarter,
    the gate (refusal lines; `before_launch` when the lane's units are about to start), how
    to report progress, and the API calls."""

    endpoint: ApiEndpoint
    guard: Callable[[str], Contamination | None]
    gate: Callable[[bool], list[str]]
    restarter: LaneRestarter | None = None
    note: Callable[[str], None] = lambda _text: None
    tick: Callable[[str], None] = lambda _name: None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    ready_timeout: float = READY_TIMEOUT
    served_model: Callable[[ApiEndpoint, float], str] = client.served_model
    complete: Callable[[ApiEndpoint, Request, float], Measured] = client.complete
    complete_once: Callable[[ApiEndpoint, Request, float], object] = client.complete_once


@dataclass(frozen=True)
class Sample:
    """One counted request's figures."""

    prompt_id: str
    round: int
    ttft_seconds: float
    decode_tokens_per_second: float | None
    tokens: int


@dataclass
class Run:
    """One run (A, B or A'): its figures and the completions of its first round."""

    label: str
    runs_as: str
    samples: list[Sample] = field(default_factory=list)
    completions: dict[str, Completion] = field(default_factory=dict)
    unsteady: list[Change] = field(default_factory=list)  # later rounds unlike the first

    def decode(self) -> list[float]:
        """Decode throughput of every request that had one (tokens/s)."""
        return [s.decode_tokens_per_second for s in self.samples if s.decode_tokens_per_second is not None]

    def ttft(self) -> list[float]:
        """Time to first token of every request (s)."""
        return [s.ttft_seconds for s in self.samples]


@dataclass
class Outcome:
    """What qualify found: the status, why, the runs, the changes and the comparisons."""

    status: Status
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    verdict: Verdict | None = None
    model: str = ""

    @property
    def candidate_completions(self) -> dict[str, Completion]:
        """The candidate's completions (its first run's), what a new release records."""
        return self.runs[0].completions if self.runs else {}


class _Stop(Exception):
    """Ends the session early with a status and a reason."""

    def __init__(self, status: Status, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def overall(comparisons: list[Comparison]) -> Verdict:
    """One verdict over the figures: unstable, else worse, else better, else no difference."""
    verdicts = {c.verdict for c in comparisons}
    for verdict in (Verdict.UNSTABLE, Verdict.WORSE, Verdict.BETTER):
        if verdict in verdicts:
            return verdict
    return Verdict.NO_DIFFERENCE


class _Session:
    """One qualify session's state (what runs now, the deadline)."""

    def __init__(self, plan: Plan, world: World) -> None:
        self.plan = plan
        self.world = world
        self.deadline = world.clock() + plan.time_limit_seconds
        self.running = plan.candidate
        self.model = ""

    def left(self, doing: str) -> float:
        remaining = self.deadline - self.world.clock()
        if remaining <= 0:
            limit = self.plan.time_limit_seconds
            shown = f"{limit / 60:g} min" if limit % 60 == 0 else f"{limit:g} s"
            raise _Stop(Status.NO_VERDICT, f"the time limit ({shown}) ran out {doing}")
        return remaining

    def guard(self, when: str) -> None:
        found = self.world.guard(when)
        if found is not None:
            raise _Stop(Status.NO_VERDICT, found.message)

    def gate(self, before_launch: bool, what: str) -> None:
        refusals = self.world.gate(before_launch)
        if refusals:
            shown = "; ".join(refusals[:5]) + (f"; and {len(refusals) - 5} more" if len(refusals) > 5 else "")
            raise _Stop(Status.NO_VERDICT, f"the gate refused {what}: {shown}")

    def restart(self, label: str, lane: Lane) -> None:
        restarter = self.world.restarter
        assert restarter is not None
        self.left(f"before run {label}")
        self.world.note(f"{label}: restarting the lane as {restarter.describe(lane)}")
        try:
            restarter.restart(self.running, lane, self.world.note,
                              lambda: self.gate(True, f"starting run {label}"))
        except _Stop as stop:
            stop.reason += " (the lane is left stopped: the gate refuses to start it there)"
            raise
        except Exception as exc:  # RestartError and the transport's: the session's reason
            raise _Stop(Status.NO_VERDICT, f"run {label}: {exc}") from None
        finally:
            self.running = lane
        self.wait_ready(label)

    def wait_ready(self, label: str) -> None:
        until = self.world.clock() + min(self.world.ready_timeout, self.left(f"before run {label}"))
        while True:
            try:
                self.model = self.world.served_model(self.world.endpoint, 10.0)
                return
            except ApiError as exc:
                if self.world.clock() >= until:
                    raise _Stop(Status.NO_VERDICT, f"run {label}: the lane did not answer after its restart: "
                                                   f"{exc}") from None
            self.world.sleep(READY_POLL_SECONDS)

    def request(self, prompt: str, max_tokens: int | None = None) -> Request:
        sampling = self.plan.prompts.sampling
        return Request(self.model, prompt, max_tokens or sampling.max_tokens, sampling.seed,
                       float(sampling.temperature), sampling.ignore_eos)

    def measure(self, label: str, runs_as: str) -> Run:
        prompts, run, world = self.plan.prompts, Run(label, runs_as), self.world
        self.guard(f"before run {label}")
        warm = self.request(prompts.warmup.prompt, 16)
        for number in range(prompts.warmup.requests):
            world.note(f"{label}: warm-up request {number + 1} of {prompts.warmup.requests} (not counted)")
            self.call(world.complete_once, warm, f"warm-up of run {label}")
        world.note(f"{label}: {prompts.samples_per_run()} requests "
                   f"({len(prompts.prompts)} prompts x {prompts.rounds} rounds)")
        for round_number in range(1, prompts.rounds + 1):
            for prompt in prompts.prompts:
                where = f"run {label}, prompt {prompt.id}, round {round_number}"
                self.guard(f"during run {label}, before prompt {prompt.id} round {round_number}")
                measured = self.call(world.complete, self.request(prompt.text), where)
                run.samples.append(Sample(prompt.id, round_number, measured.ttft_seconds,
                                          measured.decode_tokens_per_second, measured.tokens))
                completion = measured.completion(prompt.id)
                first = run.completions.setdefault(prompt.id, completion)
                if completion.digest() != first.digest():
                    run.unsteady += [_renamed(c, f"{prompt.id} (round {round_number} against round 1)")
                                     for c in changes({prompt.id: first}, {prompt.id: completion})]
                self.world.tick(prompt.id)
        self.guard(f"after run {label}")
        return run

    def call(self, send: Callable[[ApiEndpoint, Request, float], T], request: Request, where: str) -> T:
        left = min(COMPLETION_DEADLINE, self.left(where))
        try:
            return send(self.world.endpoint, request, left)
        except ApiError as exc:
            raise _Stop(Status.NO_VERDICT, f"{where}: {exc}") from None


def _renamed(change: Change, prompt_id: str) -> Change:
    return Change(prompt_id, change.what, change.position, change.before, change.after)


def qualify(plan: Plan, world: World) -> Outcome:
    """Run the session (see the module text); the outcome. The lane is left running the candidate."""
    session = _Session(plan, world)
    outcome = Outcome(Status.NO_VERDICT)
    try:
        session.left("before the first run")
        world.note(f"gate: the lane {plan.lane_name} as it runs")
        session.gate(False, "the lane as it runs")
        if plan.previous is None:
            _first_release(session, outcome)
        else:
            _abab(session, outcome)
    except _Stop as stop:
        outcome.status = stop.status
        outcome.reasons.append(stop.reason)
    finally:
        _back_to_candidate(session, outcome)
    outcome.model = session.model
    return outcome


def _first_release(session: _Session, outcome: Outcome) -> None:
    """The lane's first release: determinism only, on the lane as it runs."""
    session.wait_ready("A")
    run = session.measure("A", "the lane as it runs")
    outcome.runs.append(run)
    if run.unsteady:
        outcome.changes = run.unsteady
        raise _Stop(Status.FAILED, "the candidate does not answer the same prompt the same way twice")
    outcome.status = Status.QUALIFIED
    outcome.notes.append("first release of the lane: determinism only (no previous release to compare with)")


def _abab(session: _Session, outcome: Outcome) -> None:
    plan, restarter = session.plan, session.world.restarter
    assert plan.previous_lane is not None and restarter is not None
    same = restarter.describe(plan.previous_lane) == restarter.describe(plan.candidate)
    if same and image_digest(plan.previous_lane) == image_digest(plan.candidate):
        outcome.notes.append(f"B runs as A does ({restarter.describe(plan.candidate)}, the same image): the "
                             "comparison measures this session's noise and what a restart changes")
    for label, lane, role in (("A", plan.candidate, "candidate"), ("B", plan.previous_lane, plan.previous),
                              ("A'", plan.candidate, "candidate")):
        session.restart(label, lane)
        run = session.measure(label, f"{role}: {restarter.describe(lane)}")
        outcome.runs.append(run)
        if run.unsteady:
            outcome.changes = run.unsteady
            raise _Stop(Status.FAILED, f"run {label} does not answer the same prompt the same way twice")
        if label == "A":
            outcome.changes = changes(plan.previous_completions, run.completions)
            if outcome.changes:
                raise _Stop(Status.FAILED, f"{len(outcome.changes)} completion(s) differ from release "
                                           f"{plan.previous}'s")
        if label == "B":
            drifted = changes(plan.previous_completions, run.completions)
            if drifted:
                outcome.notes.append(f"release {plan.previous}'s own build now answers {len(drifted)} "
                                     "prompt(s) unlike its record: what changed is not the build (the host?)")
    a, b, a_again = outcome.runs
    again = changes(a.completions, a_again.completions)
    if again:
        outcome.changes = [_renamed(c, f"{c.prompt_id} (run A' against run A)") for c in again]
        raise _Stop(Status.FAILED, "the candidate answered differently after its restart")
    _compare(outcome, str(plan.previous), a, b, a_again)


def _compare(outcome: Outcome, previous: str, a: Run, b: Run, a_again: Run) -> None:
    figures = (("decode tokens/s", Run.decode, True), ("time to first token s", Run.ttft, False))
    for name, samples, higher in figures:
        seen = [samples(run) for run in (a, b, a_again)]
        if min(len(s) for s in seen) < MIN_SAMPLES:
            raise _Stop(Status.NO_VERDICT, f"{name}: fewer than {MIN_SAMPLES} measured requests in a run")
        outcome.comparisons.append(compare(name, seen[0], seen[1], seen[2], higher_is_better=higher))
    outcome.verdict = overall(outcome.comparisons)
    if outcome.verdict in (Verdict.BETTER, Verdict.NO_DIFFERENCE):
        outcome.status = Status.QUALIFIED
    elif outcome.verdict is Verdict.WORSE:
        outcome.status = Status.FAILED
        worse = [c.figure for c in outcome.comparisons if c.verdict is Verdict.WORSE]
        outcome.reasons.append(f"the candidate is worse than release {previous} ({', '.join(worse)}), "
                               "beyond its own drift")
    else:
        outcome.status = Status.NO_VERDICT
        unstable = [c.figure for c in outcome.comparisons if c.verdict is Verdict.UNSTABLE]
        outcome.reasons.append(f"unstable: the candidate's two runs disagree ({', '.join(unstable)})")


def _back_to_candidate(session: _Session, outcome: Outcome) -> None:
    """After B, the lane runs the candidate again (said when that fails)."""
    if session.running is session.plan.candidate or session.world.restarter is None:
        return
    try:
        session.world.note("restoring the candidate")
        session.world.restarter.restart(session.running, session.plan.candidate, session.world.note,
                                        lambda: session.gate(True, "restoring the candidate"))
        session.running = session.plan.candidate
    except _Stop as stop:
        outcome.reasons.append(f"{stop.reason} (the lane is left stopped)")
    except Exception as exc:  # said, never raised: the outcome is already decided
        outcome.reasons.append(f"the lane could NOT be put back on the candidate: {exc}")
