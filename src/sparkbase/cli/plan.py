"""Dry run: for each node, every operation apply would change, with unified diffs of files
(never of secret files), and whether a reboot would be needed; for a node that needs one
and serves a lane, whether apply --allow-reboot would refuse it or (--drain) which lanes it
would stop, on which nodes. Nothing on a node changes."""

from __future__ import annotations

import argparse

from sparkbase.cli.common import add_site_arguments, add_target_arguments
from sparkbase.cli.deploying import add_deploy_arguments, prepared_run, print_report
from sparkbase.console import Progress
from sparkbase.deploy.assign import breaches_by_baseline
from sparkbase.deploy.runner import Options, plan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `sparkbase plan`."""
    add_site_arguments(parser)
    add_target_arguments(parser)
    add_deploy_arguments(parser)
    parser.add_argument("--drain", action="store_true",
                        help="show what apply --allow-reboot --drain would stop (default: show which "
                        "reboots it would refuse because the node serves a lane)")


def run(args: argparse.Namespace) -> int:
    """Plan; exit 0 when nothing would change, 1 when something would, 3 unreachable."""
    site, nodes, lab, mok = prepared_run(args)
    with Progress("plan") as progress:
        report = plan(site, nodes, Options(lab=lab, mok=mok, drain=args.drain, progress=progress.step))
    for name, breaches in breaches_by_baseline(site, nodes).items():
        report.notes.append(f"note: baseline '{name}' breaks the site contract ({'; '.join(breaches)}); "
                            "apply needs --override-policy REASON")
    print_report(report, args.json, details=True)
    return report.exit_code()
