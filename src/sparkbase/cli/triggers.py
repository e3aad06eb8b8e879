"""Evaluate the re-open triggers in baselines/site.yaml, with evidence.

kernel-pin triggers read the site contract and the driver the inventory's baselines pin
(and, with --lab/--live, what the fleet runs); session-load triggers read the serving
engines' own Prometheus metrics (SGLang
sglang:num_running_reqs and sglang:num_used_tokens, vLLM vllm:num_requests_running,
vllm:kv_cache_usage_perc and vllm:cache_config_info; the names and what counts as a
long session are stated in the trigger). A session-load trigger fires on a load sustained
over its window (window_minutes, sustained_fraction: the site's decisions): with
--prometheus URL it is judged over the site's Prometheus history (one range query per
metric over the window, every 15 s or coarser, each answered in full within 10 seconds);
a sample time Prometheus has no reading for counts for neither side. --metrics reads a
URL or saved text file instead (a regular file or an http(s) answer of at most 16 MiB, a
URL answering in full within 10 seconds; repeat --metrics for several engines): saved
scrapes over the window are judged as history, one scrape is a snapshot, not sustained
(unknown). Without either, the active lane's own endpoints are scraped once (the lane the
proxy's .env names; its runtime.metrics on each node; with --lab only the lab's loopback
ones): a snapshot too; the verdict says which source it read, and a node that could not be
read keeps the trigger from being judged quiet.
Exit 0 when every trigger was judged and none fired, 1 when one fired, 4 when none fired
but one could not be judged (a snapshot, no metrics, a scrape without the metrics it
reads, a window with too few readings), 2 bad configuration, unusable metrics or a
Prometheus that cannot be asked.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from sparkbase.cli.common import (
    add_site_arguments,
    add_target_arguments,
    lab_path,
    load_site_or_exit,
    selected_nodes,
)
from sparkbase.cli.lane import proxy_env_file
from sparkbase.facts.collect import gather_fleet
from sparkbase.facts.model import NodeFacts
from sparkbase.facts.script import FactPlan
from sparkbase.gate.lane_metrics import LaneMetricsError, scrape_lane, source_lines, wanted_metrics
from sparkbase.gate.metrics import MetricsError, Sample, load_metrics, parse_scrapes, shown_source
from sparkbase.gate.prometheus import PrometheusError, query_range, window_ending
from sparkbase.gate.proxy_env import ProxyEnvError, active_lane, read_env
from sparkbase.gate.triggers import Grid, History, MetricsSource, TriggerVerdict, evaluate, exit_status, now
from sparkbase.model.site import Site
from sparkbase.model.site_rules import SessionLoadTrigger
from sparkbase.text import shown
from sparkbase.transport import ssh_targets


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `sparkbase triggers`."""
    add_site_arguments(parser)
    add_target_arguments(parser)
    given = parser.add_mutually_exclusive_group()
    given.add_argument("--prometheus", metavar="URL", default=None,
                       help="the site's Prometheus server (http(s) URL): each session-load trigger is judged "
                       "over its window of history (range queries of the metrics it reads, the series the "
                       "lane exports)")
    given.add_argument("--metrics", metavar="URL_OR_FILE", action="append", default=None,
                       help="Prometheus scrape of a serving engine: an http(s) URL or a saved text file of "
                       "scrapes (repeatable)")
    parser.add_argument("--env-file", type=Path, default=None,
                        help="the proxy's .env naming the active lane, whose endpoints are scraped without "
                        "--metrics (default: site.yaml proxy.env_file; with --lab, LAB_DIR/proxy.env)")
    parser.add_argument("--live", action="store_true",
                        help="ask the inventory's nodes what they run (implied by --lab)")
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")


def run(args: argparse.Namespace) -> int:
    """Evaluate every trigger and print the verdicts."""
    site = load_site_or_exit(args)
    lab = lab_path(args)
    samples: list[Sample] | None = None
    scraped_at = now()  # one evaluation time for every untimestamped URL scrape
    source: MetricsSource | None = None
    history: dict[str, History] | None = None
    if args.prometheus is not None:
        try:
            history = prometheus_history(site, args.prometheus, scraped_at)
        except PrometheusError as exc:
            print(f"sparkbase: prometheus: {shown(exc)}", file=sys.stderr)
            return 2
    elif args.metrics is not None:
        wanted = wanted_metrics(site)
        samples = []
        try:
            for given in args.metrics:
                text = load_metrics(given)
                samples += parse_scrapes(text, scraped_at, shown_source(given), wanted)
        except MetricsError as exc:
            print(f"sparkbase: metrics: {shown(exc)}", file=sys.stderr)
            return 2
        named = ", ".join(shown_source(given) for given in args.metrics)
        source = MetricsSource(lines=(f"metrics source: --metrics {named}",))
    elif any(trigger.kind == "session-load" for trigger in site.rules.triggers):
        samples, source = _active_lane_metrics(args, site, lab, scraped_at)
    live = None
    if args.live or lab is not None:
        live = _live_kernels(site, selected_nodes(site, args), lab)
    verdicts = evaluate(site, samples, live, source, history)
    if args.json:
        fields = ("id", "kind", "status", "fired", "description", "reopens", "evidence")
        triggers = [{name: getattr(v, name) for name in fields} for v in verdicts]
        print(json.dumps({"format": 1, "triggers": triggers}, indent=2))
    else:
        for line in verdict_lines(verdicts):
            print(line)
    return exit_status(verdicts)


def prometheus_history(site: Site, url: str, end: float) -> dict[str, History]:
    """Each session-load trigger's window ending at `end`, read from the Prometheus at `url`
    (`PrometheusError` when it cannot be asked or its answer is not usable)."""
    def utc(seconds: int) -> str:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    history: dict[str, History] = {}
    for trigger in site.rules.triggers:
        if not isinstance(trigger, SessionLoadTrigger):
            continue
        window = window_ending(end, trigger.window_minutes)
        answer = query_range(url, trigger.metric_names(), window)
        lines = (f"metrics source: --prometheus {shown_source(url)}: range queries of "
                 f"{', '.join(sorted(trigger.metric_names()))} from {utc(window.start)} to {utc(window.end)} "
                 f"every {window.step} s", *(f"Prometheus warning: {warning}" for warning in answer.warnings))
        history[trigger.id] = History(answer.samples, Grid(window.start, window.end, window.step), lines)
    return history


def _active_lane_metrics(args: argparse.Namespace, site: Site, lab: Path | None, scraped_at: float
                         ) -> tuple[list[Sample] | None, MetricsSource]:
    """Without --metrics: the active lane's own endpoints (lanes/NAME.yaml runtime.metrics;
    with --lab only the lab's loopback ones), scraped; or why there is nothing to read."""
    if site.rules.proxy is None and args.env_file is None:
        return None, MetricsSource(lines=("metrics source: none (no --metrics, and site.yaml has no proxy: "
                                          "block naming the active lane)",))
    env = proxy_env_file(args, site)
    try:
        key = site.rules.proxy.key if site.rules.proxy is not None else "SERVING_LANE"
        lane = active_lane(read_env(env), key, env)
    except ProxyEnvError as exc:
        why = f"metrics source: none (no --metrics; active lane unknown: {exc})"
        return None, MetricsSource(lines=(why,))
    if lane not in site.lanes:
        return None, MetricsSource(lines=(f"metrics source: none (no --metrics; the active lane {lane} "
                                          f"from {env} has no lanes/{lane}.yaml)",))
    try:
        scrapes = scrape_lane(site, lane, lab, scraped_at)
    except LaneMetricsError as exc:
        return None, MetricsSource(lines=(f"metrics source: none (no --metrics; {exc})",))
    samples = [sample for scrape in scrapes for sample in scrape.samples]
    missing = tuple(scrape.node for scrape in scrapes if not scrape.scraped)
    return samples, MetricsSource(lines=tuple(source_lines(lane, env, scrapes)), missing=missing)


def verdict_lines(verdicts: list[TriggerVerdict]) -> list[str]:
    """The verdicts for people: one status line per trigger, then its evidence. Every field
    is shown escaped, so a description cannot start a line of its own ("QUIET ...")."""
    lines: list[str] = []
    for v in verdicts:
        lines.append(f"{v.status.upper():7} {shown(v.id)} ({shown(v.kind)}): {shown(v.description)}")
        lines += [f"        evidence: {shown(line)}" for line in v.evidence]
        if v.fired:
            lines.append(f"        re-opens: {shown(v.reopens)}")
    return lines


def _live_kernels(site: Site, nodes: list[str], lab: Path | None) -> dict[str, tuple[str | None, int | None]]:
    """node -> (release, page size) from a minimal one-round-trip gather; unreachable → (None, None)."""
    gathered = gather_fleet(ssh_targets(site, lab), {node: FactPlan(core_only=True) for node in nodes})
    return {node: (f.kernel_release, f.page_size) if isinstance(f, NodeFacts) else (None, None)
            for node, f in gathered.items()}
