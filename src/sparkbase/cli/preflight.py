"""The lane launch gate: refuse unless every node of the lane is the host it was qualified on.

Qualified only if the lane is enabled, its shape is qualified for its baseline, the baseline
satisfies the site contract, and every node is reachable, carries the lane's baseline and
version (stamp) and passes every error check (fabric up, GIDs in place, no GPU latch), and
the fleet agrees; and the lane's processes on every node (found by its runtime `match`
strings, with their cgroup and workers) load the baseline's NCCL settings and library and
run in the serving slice: a node where the lane runs nowhere is refused as "not serving",
unless `--before-launch` says the lane's units are about to be started (then only the
processes already running are judged). `--override REASON` launches a refused lane anyway and records the
refusals and REASON (visible text, at most 500 characters) in the override log; a disabled
lane cannot be overridden (enable it in reviewed YAML). Exit 0 qualified (or overridden),
1 refused, 2 bad configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sparkbase.cli.common import (
    add_lab_arguments,
    add_site_arguments,
    lab_path,
    lane_or_exit,
    load_site_or_exit,
    reason_or_exit,
)
from sparkbase.gate.preflight import PreflightResult, preflight
from sparkbase.model.site import Site
from sparkbase.policy.overrides import OverrideLogError, RecordKind, append_record, log_path, new_record
from sparkbase.text import shown
from sparkbase.transport import ssh_targets


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `sparkbase preflight`."""
    parser.add_argument("lane", help="lane name (lanes/NAME.yaml)")
    add_site_arguments(parser)
    add_lab_arguments(parser)
    parser.add_argument("--override", metavar="REASON", default=None,
                        help="launch anyway (not a disabled lane); the refusals and REASON are appended to "
                        "the override log")
    parser.add_argument("--log", type=Path, default=None,
                        help="override log (default: <site>/.sparkbase/overrides.log)")
    parser.add_argument("--before-launch", action="store_true",
                        help="the gate before the lane's units start: a node where the lane runs nowhere is "
                        "not refused as not serving (processes already running are still judged)")
    parser.add_argument("--parallel", type=int, default=16, metavar="N", help="nodes asked at once")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")


def run(args: argparse.Namespace) -> int:
    """Run the gate."""
    site = load_site_or_exit(args)
    lane_or_exit(site, args.lane)
    reason = reason_or_exit(args.override, "--override")
    result = preflight(site, args.lane, ssh_targets(site, lab_path(args)), args.parallel,
                       before_launch=args.before_launch)
    lines = [refusal.line() for refusal in result.refusals]
    if result.qualified:
        _print_json(args, result, overridden=False)
        if not args.json:
            for line in result.where_it_runs():
                print(f"  {shown(line)}")
            print(f"preflight {shown(args.lane)}: qualified ({len(result.report.nodes)} nodes, "
                  f"{result.elapsed_seconds:.2f}s)")
        return 0
    stream = sys.stderr if args.json else sys.stdout
    if not args.json:
        for line in lines:
            print(line, file=stream)
    summary = f"preflight {shown(args.lane)}: REFUSED ({len(lines)} reason(s), {result.elapsed_seconds:.2f}s)"
    if reason is None or result.blocking_override:
        _print_json(args, result, overridden=False)
        if reason is not None:
            summary += ("; --override cannot launch a disabled lane: enable it (`enabled: true`) in "
                        f"lanes/{shown(args.lane)}.yaml through review first")
        print(summary, file=stream)
        return 1
    recorded = _record_override(args, site, lines, reason)
    _print_json(args, result, overridden=recorded)
    return 0 if recorded else 1


def _print_json(args: argparse.Namespace, result: PreflightResult, overridden: bool) -> None:
    """With --json, the verdict as one JSON document (format 1) on stdout."""
    if not args.json:
        return
    document = {"format": 1, "lane": args.lane, "qualified": result.qualified, "overridden": overridden,
                "refusals": [{"where": r.where, "reason": r.reason} for r in result.refusals],
                "elapsed_seconds": round(result.elapsed_seconds, 3)}
    print(json.dumps(document, indent=2))


def _record_override(args: argparse.Namespace, site: Site, lines: list[str], reason: str) -> bool:
    """Log the override (one record) and warn; False when it could not be recorded (only a
    recorded override launches)."""
    lane = site.lanes[args.lane]
    log = args.log or log_path(site.root)
    record = new_record(RecordKind.PREFLIGHT, reason, lane=args.lane, baseline=lane.baseline,
                        nodes=list(lane.nodes), refusals=lines)
    try:
        append_record(log, record)
    except OverrideLogError as exc:
        print(f"sparkbase: {shown(exc)}", file=sys.stderr)
        print(f"preflight {shown(args.lane)}: REFUSED: the override could not be recorded", file=sys.stderr)
        return False
    print(f"WARNING: preflight {shown(args.lane)} REFUSED for {len(lines)} reason(s) and OVERRIDDEN by "
          f"{shown(record.who)}: \"{shown(record.reason)}\" (recorded in {shown(log)})", file=sys.stderr)
    return True
