"""Drift audit: every check on every node and across the fleet, one SSH round trip per node.

Exit 0 clean, 1 drift (a failed error-severity check), 2 bad configuration, 3 a node was
unreachable (the others are still audited and reported).

The serving processes of every enabled lane are judged where they run (`runtime.*`). The
lane the model-name proxy's .env names (site.yaml `proxy:`; in the lab LAB_DIR/proxy.env)
takes traffic, so it must be serving on each of its nodes: where it runs nowhere, that is a
failure (`runtime.running`: not serving). Any other lane may be idle (a skip): only one
lane serves at a time, and an idle lane must not make every audit fail.

`--baseline NAME --limit NODE…` judges those nodes against another baseline, as
`apply --baseline` converges them; a node whose stamp names another baseline than the
inventory assigns gets a warning (stamp.assignment) either way.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from sparkbase.atomicfile import write_output
from sparkbase.audit.expected import Expected, expected_for
from sparkbase.audit.reports import audit_table, render, summary_line
from sparkbase.audit.run import Gatherer, run_audit
from sparkbase.audit.runtime import LaneProbe, lane_probe, probes_by_node
from sparkbase.cli.common import (
    add_site_arguments,
    add_target_arguments,
    lab_path,
    load_site_or_exit,
    selected_nodes,
)
from sparkbase.console import Progress, print_table
from sparkbase.deploy.assign import AssignmentError, with_assignment
from sparkbase.facts.collect import gather_fleet, gather_node
from sparkbase.facts.model import FactsResult
from sparkbase.facts.script import FactPlan
from sparkbase.gate.proxy_env import ProxyEnvError, active_lane, read_env
from sparkbase.model.site import Site
from sparkbase.text import shown
from sparkbase.transport import SshTarget, ssh_targets

FORMATS = ("table", "json", "junit", "prometheus")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `sparkbase audit`."""
    add_site_arguments(parser)
    add_target_arguments(parser)
    parser.add_argument("--format", choices=FORMATS, default="table", help="report format (default: table)")
    parser.add_argument("--output", type=Path, default=None, help="write the report here (atomically)")
    parser.add_argument("--parallel", type=int, default=16, metavar="N",
                        help="nodes audited at once (default: 16)")
    parser.add_argument("--baseline", default=None, metavar="NAME",
                        help="audit the --limit nodes against this baseline instead of the inventory's "
                        "(as `apply --baseline` converges them)")
    parser.add_argument("-v", "--verbose", action="store_true", help="table: show passing checks too")


def run(args: argparse.Namespace) -> int:
    """Run the audit and print or write the report."""
    if args.parallel < 1:
        print("sparkbase: --parallel must be at least 1", file=sys.stderr)
        return 2
    site = load_site_or_exit(args)
    nodes = selected_nodes(site, args)
    problem = _baseline_problem(site, args)
    if problem is not None:
        print(f"sparkbase: {problem}", file=sys.stderr)
        return 2
    wanted: dict[str, Expected] = {node: expected_for(site, node, args.baseline) for node in nodes}
    lab = lab_path(args)
    targets = ssh_targets(site, lab)
    # the serving processes of every enabled lane, read in the same round trip; the lane
    # the proxy sends traffic to must be serving (else "not serving"), the others may idle
    active = serving_lane(site, lab)
    running = probes_by_node(
        (lane.nodes, _probe(site, name, required=name == active))
        for name, lane in sorted(site.lanes.items()) if lane.enabled
    )
    with Progress("audit", total=len(nodes), live=len(nodes) > 1) as progress:
        report = run_audit(site.rules.site, wanted, targets, args.parallel,
                           gather=_gather_counted(progress), probes=running)
    if args.output is not None:
        try:
            write_output(args.output, render(report, args.format, args.verbose))
        except OSError as exc:
            print(f"sparkbase: --output {shown(args.output)}: cannot write: {exc.strerror}", file=sys.stderr)
            return 2
        if args.format != "table":
            print(summary_line(report), file=sys.stderr)
    elif args.format == "table":
        print_table(audit_table(report, args.verbose))
        print(summary_line(report))
    else:
        sys.stdout.write(render(report, args.format, args.verbose))
    for node in report.unreachable:
        print(f"sparkbase: {shown(node.node)} unreachable: {shown(node.reason)}", file=sys.stderr)
    return report.exit_code


def _probe(site: Site, name: str, required: bool) -> LaneProbe | None:
    """Lane `name`'s probe, required to be serving when it is the active lane."""
    probe = lane_probe(site, name)
    return replace(probe, required=True) if probe is not None and required else probe


def serving_lane(site: Site, lab: Path | None = None) -> str | None:
    """The lane the proxy's .env names (in the lab: LAB_DIR/proxy.env), or None when the
    site has no proxy or the file cannot be read (then no lane counts as active)."""
    proxy = site.rules.proxy
    if proxy is None:
        return None
    path = lab / "proxy.env" if lab is not None else site.path(proxy.env_file)
    try:
        return active_lane(read_env(path), proxy.key, path)
    except ProxyEnvError:
        return None


def _gather_counted(progress: Progress) -> Gatherer:
    """The fleet's facts gathered as usual, each node counted on `progress` when it answers
    (or fails to)."""
    def gather_one(node: str, target: SshTarget, plan: FactPlan) -> FactsResult:
        try:
            return gather_node(node, target, plan)
        finally:
            progress.done(node)

    def gather(targets: Mapping[str, SshTarget], plans: Mapping[str, FactPlan], parallel: int
               ) -> dict[str, FactsResult]:
        return gather_fleet(targets, plans, parallel, gather=gather_one)

    return gather


def _baseline_problem(site: Site, args: argparse.Namespace) -> str | None:
    """Why `--baseline` cannot be audited (no --limit, abstract, unknown), or None."""
    if args.baseline is None:
        return None
    if not args.limit:
        return "--baseline needs --limit NODE... (the nodes converged to it)"
    try:
        with_assignment(site, list(args.limit), args.baseline)
    except AssignmentError as exc:
        return f"--baseline {shown(args.baseline)}: {shown(str(exc))}"
    return None
