"""The lane launch gate: refuse unless every node of the lane is the host it was qualified on.

Qualified only if the lane is enabled, its shape is qualified for its baseline, the baseline
satisfies the site contract, and every node is reachable, carries the lane's baseline and
version (stamp) and passes every error check (fabric up, GIDs in place, no GPU latch), and
the fleet agrees. Exit 0 qualified (or overridden), 1 refused, 2 bad configuration.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sparkbase.cli.common import add_site_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `sparkbase preflight`."""
    parser.add_argument("lane", help="lane name (lanes/NAME.yaml)")
    add_site_arguments(parser)
    parser.add_argument(
        "--lab",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="reach the nodes of the emulated fleet (default dir: $SPARKBASE_LAB_DIR)",
    )
    parser.add_argument(
        "--override",
        metavar="REASON",
        default=None,
        help="launch anyway; the refusals and REASON are appended to the override log",
    )
    parser.add_argument(
        "--log",
        type=Path,
        default=None,
        help="override log (default: <site>/.sparkbase/overrides.log)",
    )
    parser.add_argument("--parallel", type=int, default=16, metavar="N", help="nodes asked at once")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")


def run(args: argparse.Namespace) -> int:
    """Run the gate."""
    import json

    from sparkbase.cli.common import lab_path, load_site_or_exit
    from sparkbase.gate.overrides import DEFAULT_LOG, append_override, override_record
    from sparkbase.gate.preflight import preflight
    from sparkbase.transport import ssh_targets

    site = load_site_or_exit(args)
    if args.lane not in site.lanes:
        print(f"sparkbase: no lane {args.lane} (have: {', '.join(sorted(site.lanes))})", file=sys.stderr)
        return 2
    if args.override is not None and not args.override.strip():
        print("sparkbase: --override needs a reason a person can read later", file=sys.stderr)
        return 2
    result = preflight(site, args.lane, ssh_targets(site, lab_path(args)), args.parallel)
    lines = [refusal.line() for refusal in result.refusals]
    if args.json:
        print(
            json.dumps(
                {
                    "format": 1,
                    "lane": args.lane,
                    "qualified": result.qualified,
                    "overridden": bool(lines) and args.override is not None,
                    "refusals": [{"where": r.where, "reason": r.reason} for r in result.refusals],
                    "elapsed_seconds": round(result.elapsed_seconds, 3),
                },
                indent=2,
            )
        )
    if result.qualified:
        if not args.json:
            print(
                f"preflight {args.lane}: qualified ({len(result.report.nodes)} nodes, "
                f"{result.elapsed_seconds:.2f}s)"
            )
        return 0
    stream = sys.stderr if args.json else sys.stdout
    if not args.json:
        for line in lines:
            print(line, file=stream)
    if args.override is None:
        print(
            f"preflight {args.lane}: REFUSED ({len(lines)} reason(s), {result.elapsed_seconds:.2f}s)",
            file=stream,
        )
        return 1
    log = args.log or site.root / DEFAULT_LOG
    append_override(log, override_record(args.lane, args.override, lines))
    print(
        f"WARNING: preflight {args.lane} REFUSED for {len(lines)} reason(s) and OVERRIDDEN by "
        f"{override_record(args.lane, args.override, [])['user']}: {args.override!r} (recorded in {log})",
        file=sys.stderr,
    )
    return 0
