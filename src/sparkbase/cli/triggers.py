"""Evaluate the re-open triggers in baselines/site.yaml, with evidence.

kernel-pin triggers read the site contract (and, with --lab/--live, what the fleet runs);
session-load triggers read Prometheus scrapes (--metrics URL or saved text file).
Exit 0 when none fired, 1 when one fired, 2 bad configuration or unreadable metrics.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbase.cli.common import add_site_arguments, add_target_arguments

if TYPE_CHECKING:
    from sparkbase.model.site import Site


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `sparkbase triggers`."""
    add_site_arguments(parser)
    add_target_arguments(parser)
    parser.add_argument(
        "--metrics",
        metavar="URL_OR_FILE",
        default=None,
        help="Prometheus scrape: an http(s) URL or a saved text file of scrapes",
    )
    parser.add_argument(
        "--live", action="store_true", help="ask the inventory's nodes what they run (implied by --lab)"
    )
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")


def run(args: argparse.Namespace) -> int:
    """Evaluate every trigger and print the verdicts."""
    import json

    from sparkbase.cli.common import lab_path, load_site_or_exit, selected_nodes
    from sparkbase.gate.triggers import evaluate, load_metrics, now, parse_scrapes

    site = load_site_or_exit(args)
    samples = None
    if args.metrics is not None:
        try:
            samples = parse_scrapes(load_metrics(args.metrics), now())
        except (OSError, ValueError) as exc:
            print(f"sparkbase: cannot read metrics from {args.metrics}: {exc}", file=sys.stderr)
            return 2
    live = None
    if args.live or args.lab is not None:
        live = _live_kernels(site, selected_nodes(site, args), lab_path(args))
    verdicts = evaluate(site, samples, live)
    if args.json:
        print(
            json.dumps(
                {
                    "format": 1,
                    "triggers": [
                        {
                            "id": v.id,
                            "kind": v.kind,
                            "status": v.status,
                            "fired": v.fired,
                            "description": v.description,
                            "reopens": v.reopens,
                            "evidence": v.evidence,
                        }
                        for v in verdicts
                    ],
                },
                indent=2,
            )
        )
    else:
        for v in verdicts:
            print(f"{v.status.upper():7} {v.id} ({v.kind}): {v.description}")
            for line in v.evidence:
                print(f"        evidence: {line}")
            if v.fired:
                print(f"        re-opens: {v.reopens}")
    return 1 if any(v.fired for v in verdicts) else 0


def _live_kernels(site: Site, nodes: list[str], lab: Path | None) -> dict[str, tuple[str | None, int | None]]:
    """node -> (release, page size) from a minimal one-round-trip gather; unreachable → (None, None)."""
    from sparkbase.facts.collect import gather_fleet
    from sparkbase.facts.model import NodeFacts
    from sparkbase.facts.script import FactPlan
    from sparkbase.transport import ssh_targets

    gathered = gather_fleet(ssh_targets(site, lab), {node: FactPlan(core_only=True) for node in nodes})
    return {
        node: (f.kernel_release, f.page_size) if isinstance(f, NodeFacts) else (None, None)
        for node, f in gathered.items()
    }
