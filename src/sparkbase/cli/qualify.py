"""The release gate: qualify what the lane runs now against its last qualified release.

Against the lane's own OpenAI-compatible endpoint (SGLang and vLLM serve the same API), with
a fixed prompt set (the shipped one, or --prompts FILE; greedy, seeded, fixed length):

- the determinism gate: each prompt's completion (token ids where the engine returns them,
  else the exact text) must equal the release's (--against, default the lane's newest); any
  change fails, naming the prompts and where they first differ;
- the A/B/A comparison: the candidate, the previous release, the candidate again in one
  session, the lane restarted between the runs the way it runs (its unit; or its container:
  the site's own is stopped and kept, renamed NAME.held-by-sparkbase while the previous
  release's image runs under the lane's name with the same `docker run` options), each start
  through the gate; per request decode throughput and time to first token; the difference
  with its 95% interval judged against the candidate's own drift: better, worse, no
  difference or unstable;
- the contamination guard: the lane's own metrics before, between every two requests and
  after each run; any request that is not the gate's own gives no verdict.

A lane with no release yet gets its first on the determinism gate alone (the lane measured
as it runs, no restart). A qualified run is recorded as releases/LANE/RELEASE/ (--release
NAME, default r<N>), never rewritten; from then on `preflight` and `lane switch` refuse the
lane when what runs (baseline render hash, image digest, lane settings) matches none of its
releases. Exit 0 qualified (and recorded), 1 failed or no verdict (nothing recorded), 2 bad
input (no such lane or release, a bad prompt set, a prompt set other than the release's).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkbase.cli.common import (
    add_lab_arguments,
    add_site_arguments,
    fail,
    lab_path,
    lane_or_exit,
    load_site_or_exit,
)
from sparkbase.console import Column, Progress, Table, print_table
from sparkbase.errors import ConfigError
from sparkbase.gate.lane_metrics import LaneMetricsError, is_loopback
from sparkbase.gate.preflight import preflight
from sparkbase.gate.records import (
    LANE_COPY,
    NewRelease,
    RecordError,
    Release,
    list_releases,
    next_name,
    releases_dir,
    shape_of,
    valid_release_name,
    write_release,
)
from sparkbase.model.lanes import Lane
from sparkbase.model.site import Site, validated
from sparkbase.model.yamlio import load_yaml
from sparkbase.policy.overrides import current_user
from sparkbase.qualify.client import ApiEndpoint, ApiError
from sparkbase.qualify.endpoint import api_endpoint
from sparkbase.qualify.guard import lane_guard
from sparkbase.qualify.promptset import PromptSetFile, load_prompt_set
from sparkbase.qualify.restart import LaneRestarter, RestartError, container_of, put_back, restarter_for
from sparkbase.qualify.run import Outcome, Plan, Run, World, qualify
from sparkbase.qualify.stats import Comparison, Interval
from sparkbase.text import shown
from sparkbase.transport import ssh_targets

#: format of the --json document (tests/unit/test_qualify_cli.py pins it)
JSON_FORMAT = 1
#: the longest session allowed without --time-limit (three restarts of a TP4 lane and three runs)
DEFAULT_TIME_LIMIT_MINUTES = 90


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `sparkbase qualify`."""
    parser.add_argument("lane", help="lane name (lanes/NAME.yaml)")
    parser.add_argument("--against", metavar="RELEASE", default=None,
                        help="the release to compare with (default: the lane's newest)")
    parser.add_argument("--prompts", metavar="FILE", type=Path, default=None,
                        help="the site's own prompt set (default: the shipped set, sparkbase-v1)")
    parser.add_argument("--release", metavar="NAME", default=None,
                        help="name the release recorded when it qualifies (default: r<N>, the next number)")
    parser.add_argument("--endpoint", metavar="HOST:PORT", default=None,
                        help="the lane's OpenAI-compatible API (default: the lane file's runtime.endpoint, "
                        "else its metrics port on its first metrics node)")
    parser.add_argument("--time-limit", metavar="MINUTES", type=float, default=DEFAULT_TIME_LIMIT_MINUTES,
                        help=f"end the session without a verdict after this long (default "
                        f"{DEFAULT_TIME_LIMIT_MINUTES})")
    parser.add_argument("--parallel", type=int, default=16, metavar="N", help="nodes the gate asks at once")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_site_arguments(parser)
    add_lab_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Qualify the lane; exit 0 qualified, 1 failed or no verdict, 2 bad input."""
    site = load_site_or_exit(args)
    lane_or_exit(site, args.lane)
    prompts = load_prompt_set(args.prompts)  # a bad file: ConfigError, located, exit 2
    if not 0 < args.time_limit <= 24 * 60:
        fail(f"--time-limit {args.time_limit:g}: give minutes, more than 0 and at most a day")
    previous, previous_lane = _against(site, args, prompts)
    name = _release_name(site, args)
    started = time.monotonic()
    plan, world = _session(site, args, prompts, previous, previous_lane, lab_path(args))
    runs = 1 if previous is None else 3
    with Progress(f"qualify {args.lane}", total=runs * prompts.prompts.samples_per_run()) as progress:
        world.note, world.tick = progress.step, progress.done
        outcome = qualify(plan, world)
    qualified = outcome.status == "qualified"
    recorded = _record(site, args, name, prompts, previous, outcome) if qualified else None
    elapsed = time.monotonic() - started
    if args.json:
        print(json.dumps(document(args.lane, prompts, previous, outcome, recorded, elapsed), indent=2))
    else:
        _print_text(args.lane, prompts, previous, outcome, recorded)
    return 0 if recorded is not None else 1


def _against(site: Site, args: argparse.Namespace,
             prompts: PromptSetFile) -> tuple[Release | None, Lane | None]:
    """The release to compare with and its lane file (None, None: the lane's first)."""
    try:
        found = list_releases(site.root, args.lane)
    except RecordError as exc:
        fail(str(exc))
    if args.against is None and not found:
        return None, None
    chosen = [r for r in found if r.name == args.against] if args.against else found[-1:]
    if not chosen:
        have = ", ".join(r.name for r in found) or "none yet"
        fail(f"lane {args.lane} has no release {args.against} (releases: {have})")
    release = chosen[0]
    if release.prompt_set.get("digest") != prompts.digest:
        fail(f"release {release.name} was qualified with prompt set {release.prompt_set.get('name')} "
             f"({release.prompt_set.get('digest', '')[:19]}…), this run would use {prompts.describe()}: "
             "completions of two sets cannot be compared (give the release's set with --prompts)")
    try:
        lane = validated(load_yaml(release.path / LANE_COPY), Lane)
    except ConfigError as exc:
        fail(f"release {release.name}'s lane file no longer validates: {exc.problems[0].format()}")
    return release, lane


def _release_name(site: Site, args: argparse.Namespace) -> str:
    """The name a qualified run records (checked before anything runs)."""
    name: str = args.release or next_name(site.root, args.lane)
    if not valid_release_name(name):
        fail(f"--release {name}: use letters, digits, '.', '_' and '-' (at most 63, not starting with '.')")
    if os.path.lexists(releases_dir(site.root, args.lane) / name):
        fail(f"releases/{args.lane}/{name} exists; a release is never rewritten "
             "(give another --release NAME)")
    return name


def _session(site: Site, args: argparse.Namespace, prompts: PromptSetFile, previous: Release | None,
             previous_lane: Lane | None, lab: Path | None) -> tuple[Plan, World]:
    """The plan and what it reaches; a lane that names no endpoint or metrics exits 2."""
    lane = site.lanes[args.lane]
    targets = ssh_targets(site, lab)
    try:
        put_back(lane, targets, lambda line: print(f"qualify {args.lane}: {line}", file=sys.stderr))
    except RestartError as exc:
        print(f"sparkbase: lane {args.lane}: an earlier comparison's containers could not be put back: {exc}",
              file=sys.stderr)
        raise SystemExit(1) from None
    try:
        endpoint = given_endpoint(args.endpoint, lab is not None) if args.endpoint else api_endpoint(
            args.lane, lane, targets, lab is not None)
        guard = lane_guard(site, args.lane, lab)
    except (ApiError, LaneMetricsError) as exc:
        fail(str(exc))
    def gate(before_launch: bool) -> list[str]:
        result = preflight(site, args.lane, targets, args.parallel, before_launch=before_launch,
                           releases=False)
        return [refusal.line() for refusal in result.refusals]

    restarter: LaneRestarter | None = None
    if previous is not None and previous_lane is not None:
        try:
            restarter = restarter_for([lane, previous_lane], targets)
        except RestartError as exc:
            restarter = _Refusing(str(exc))
    plan = Plan(args.lane, lane, prompts.prompts, args.time_limit * 60,
                previous.name if previous else None, previous_lane,
                previous.completions() if previous else {})
    return plan, World(endpoint, lambda when: guard.check(when), gate, restarter)


def given_endpoint(text: str, lab: bool) -> ApiEndpoint:
    """`--endpoint HOST:PORT` (an IPv6 address in brackets); exit 2 when it is not one, or
    names a host outside 127.0.0.0/8 with --lab."""
    host, _, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c in host for c in "/@ "):
        fail(f"--endpoint {text}: give HOST:PORT (an IPv6 address as [ADDRESS]:PORT)")
    if lab and not is_loopback(host):
        fail(f"--endpoint {text}: the lab answers on 127.0.0.0/8 only; not asked")
    return ApiEndpoint("--endpoint", host, int(port))


class _Refusing:
    """A restarter for a lane no restarter here handles: every restart fails with why."""

    def __init__(self, why: str) -> None:
        self.why = why

    def describe(self, lane: Lane) -> str:
        """How the lane runs (as far as this restarter can tell)."""
        return "a container" if container_of(lane) is not None else "no unit"

    def restart(self, running: Lane, wanted: Lane, note: Any, before_start: Any = None) -> None:
        """Refuse, saying why."""
        raise RestartError(self.why)


def _record(site: Site, args: argparse.Namespace, name: str, prompts: PromptSetFile,
            previous: Release | None, outcome: Outcome) -> str | None:
    """Record the qualified release; its name, or None (said) when it cannot be written."""
    release = NewRelease(
        args.lane, name, site.root / "lanes" / f"{args.lane}.yaml", shape_of(site, args.lane),
        {"name": prompts.prompts.name, "digest": prompts.digest, "source": prompts.source},
        outcome.candidate_completions, qualification(previous, outcome), current_user(),
        datetime.now(UTC).isoformat(timespec="seconds"))
    try:
        write_release(site.root, release)
    except RecordError as exc:
        print(f"sparkbase: {shown(exc)}", file=sys.stderr)
        print(f"qualify {shown(args.lane)}: qualified, but NOT recorded", file=sys.stderr)
        return None
    return name


def qualification(previous: Release | None, outcome: Outcome) -> dict[str, Any]:
    """What a release records of how it was qualified (the --json document's figures)."""
    return {
        "against": previous.name if previous else None,
        "determinism": "first release" if previous is None else f"equal to {previous.name}",
        "verdict": str(outcome.verdict) if outcome.verdict else None,
        "model": outcome.model,
        "runs": [_run_json(run) for run in outcome.runs],
        "comparisons": [_comparison_json(c) for c in outcome.comparisons],
        "notes": list(outcome.notes),
    }


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def _run_json(run: Run) -> dict[str, Any]:
    def figures(values: list[float]) -> dict[str, Any]:
        return {"mean": _mean(values), "samples": [round(v, 6) for v in values]}

    return {"label": run.label, "runs_as": run.runs_as, "requests": len(run.samples),
            "decode_tokens_per_second": figures(run.decode()), "ttft_seconds": figures(run.ttft())}


def _comparison_json(comparison: Comparison) -> dict[str, Any]:
    def interval(value: Interval) -> dict[str, float]:
        return {"value": round(value.difference, 6), "low": round(value.low, 6), "high": round(value.high, 6)}

    return {"figure": comparison.figure, "higher_is_better": comparison.higher_is_better,
            "verdict": str(comparison.verdict), "difference": interval(comparison.difference),
            "drift": interval(comparison.drift), "bar": round(comparison.bar, 6)}


def document(lane: str, prompts: PromptSetFile, previous: Release | None, outcome: Outcome,
             recorded: str | None, elapsed: float) -> dict[str, Any]:
    """The --json document (format 1)."""
    status = str(outcome.status) if recorded is not None or outcome.status != "qualified" else "failed"
    reasons = list(outcome.reasons) + (["qualified, but the record could not be written"]
                                       if outcome.status == "qualified" and recorded is None else [])
    return {
        "format": JSON_FORMAT, "lane": lane, "status": status,
        "verdict": str(outcome.verdict) if outcome.verdict else None,
        "release": recorded, "against": previous.name if previous else None,
        "prompt_set": {"name": prompts.prompts.name, "digest": prompts.digest, "source": prompts.source},
        "reasons": reasons, "notes": list(outcome.notes),
        "changes": [{"prompt": c.prompt_id, "what": c.what, "position": c.position, "before": c.before,
                     "after": c.after, "line": c.describe()} for c in outcome.changes],
        **{key: value for key, value in qualification(previous, outcome).items()
           if key in ("model", "runs", "comparisons")},
        "elapsed_seconds": round(elapsed, 3),
    }


def _print_text(lane: str, prompts: PromptSetFile, previous: Release | None, outcome: Outcome,
                recorded: str | None) -> None:
    """The result for people: what ran, the changes, the figures, the verdict."""
    against = f"against {previous.name}" if previous else "first release (determinism only)"
    print(f"qualify {shown(lane)}: {against}; prompt set {shown(prompts.describe())}")
    for change in outcome.changes:
        print(f"  changed: {shown(change.describe())}")
    if outcome.runs:
        rows = [[run.label, run.runs_as, str(len(run.samples)), _figure(_mean(run.decode()), ".1f"),
                 _figure(_mean(run.ttft()), ".3f")] for run in outcome.runs]
        print_table(Table((Column("run"), Column("runs as", max_width=50), Column("requests", align="right"),
                           Column("decode tok/s", align="right"), Column("TTFT s", align="right")), rows))
    for c in outcome.comparisons:
        d = c.difference
        print(f"{c.figure}: A - B {d.difference:+.3f} [{d.low:+.3f}, {d.high:+.3f}] (95%), candidate drift "
              f"{c.drift.difference:+.3f} [{c.drift.low:+.3f}, {c.drift.high:+.3f}] -> {c.verdict}")
    for note in outcome.notes:
        print(f"note: {shown(note)}")
    verdict = f" ({outcome.verdict})" if outcome.verdict else ""
    if recorded is not None:
        print(f"qualify {shown(lane)}: QUALIFIED{verdict}; recorded releases/{shown(lane)}/{shown(recorded)}")
        return
    status = "FAILED" if outcome.status != "no verdict" else "NO VERDICT"
    why = "; ".join(outcome.reasons) or "not recorded"
    print(f"qualify {shown(lane)}: {status}{verdict}: {shown(why)}")


def _figure(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
