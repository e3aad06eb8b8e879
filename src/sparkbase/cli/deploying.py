"""What `plan` and `apply` share on the command line: deploy options, the run's site and
MOK key pair (exit 2 on misuse), and the printed report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import NamedTuple

from sparkbase.cli.common import fail, lab_path, load_site_or_exit, selected_nodes
from sparkbase.console import Column, Table, print_table
from sparkbase.deploy.assign import AssignmentError, with_assignment
from sparkbase.deploy.mok_keys import DeployConfigError, MokFiles, mok_dir_from_env, refuse_lab_key
from sparkbase.deploy.results import Report
from sparkbase.deploy.steps import build_steps
from sparkbase.model.site import Site
from sparkbase.text import shown


def add_deploy_arguments(parser: argparse.ArgumentParser) -> None:
    """`--baseline`, `--mok-dir`, `--json`."""
    parser.add_argument("--baseline", metavar="NAME", default=None,
                        help="for this run, converge the --limit nodes to baseline NAME instead of the "
                        "inventory's (a contract-breaking one needs --override-policy on apply)")
    parser.add_argument("--mok-dir", type=Path, default=None,
                        help="local directory with MOK.der and MOK.priv (the private key is a secret), for "
                        "baselines that sign the memory-saver module (default: $SPARKBASE_MOK_DIR; with "
                        "--lab, the lab's key pair)")
    parser.add_argument("--json", action="store_true", help="print a machine-readable report")


def site_for_run(site: Site, args: argparse.Namespace, nodes: list[str]) -> Site:
    """The site, with `--baseline` applied to the `--limit` nodes; exit 2 on misuse."""
    if args.baseline is None:
        return site
    if not args.limit:
        fail("--baseline needs --limit NODE… (which nodes move)")
    try:
        return with_assignment(site, nodes, args.baseline)
    except AssignmentError as exc:
        fail(str(exc))


def mok_files(args: argparse.Namespace, lab: Path | None) -> MokFiles | None:
    """The MOK key pair named by --mok-dir, else $SPARKBASE_MOK_DIR, else the lab's; a lab
    key for a target that is not the lab exits 2."""
    try:
        if args.mok_dir is not None:
            return refuse_lab_key(MokFiles.from_dir(args.mok_dir), lab)
        return mok_dir_from_env(lab)
    except DeployConfigError as exc:
        fail(str(exc))


class PreparedRun(NamedTuple):
    """What `plan` and `apply` act on, checked before any node is contacted."""

    site: Site
    nodes: list[str]
    lab: Path | None
    mok: MokFiles | None


def prepared_run(args: argparse.Namespace) -> PreparedRun:
    """The site (with `--baseline` applied), the selected nodes, the lab and the MOK key
    pair; every node's steps are built once, so a config problem exits 2 before connecting."""
    site = load_site_or_exit(args)
    nodes = selected_nodes(site, args)
    site = site_for_run(site, args, nodes)
    lab = lab_path(args)
    mok = mok_files(args, lab)
    check_buildable(site, nodes, mok)
    return PreparedRun(site, nodes, lab, mok)


def check_buildable(site: Site, nodes: list[str], mok: MokFiles | None) -> None:
    """Build every node's steps once before connecting: config problems exit 2."""
    for node in nodes:
        try:
            build_steps(site, node, mok)
        except DeployConfigError as exc:
            fail(f"{node}: {exc}")


def print_report(report: Report, as_json: bool, details: bool) -> None:
    """The report: JSON on stdout, or per-node changes (and diffs) and a summary. Names,
    reasons and notes are shown escaped; a diff line keeps its tabs (`sparkbase.text`)."""
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
        return
    for node in report.nodes:
        if details and node.changes:
            print(f"== {shown(node.node)} ({shown(node.baseline)})")
            for op in node.changes:
                print(f"  ~ {shown(op.name)}")
                for line in op.diff:
                    print("      " + shown(line, keep="\t"))
            for op in node.operations:
                if op.note:
                    print(f"  . {shown(op.name)}: {shown(op.reason)}")
            if node.reboot_reasons:
                print(f"  reboot needed: {shown('; '.join(node.reboot_reasons))}")
    for note in report.notes:
        print(shown(note))
    print(f"{report.command} summary:")
    print_table(summary_table(report))


#: a node's status in colour on a terminal
STATUS_STYLES = {
    "unchanged": "green", "changed": "green", "would change": "yellow", "reboot pending": "yellow",
    "failed": "bold red", "unreachable": "bold red", "not started": "dim", "locked": "bold red",
}


def summary_table(report: Report) -> Table:
    """One row per node: its baseline, where it ended up, and the detail (changes, the
    reboot it needs or had, why it stopped)."""
    columns = (Column("NODE", wrap=False), Column("BASELINE"),
               Column("STATUS", styles=STATUS_STYLES, wrap=False), Column("DETAIL"))
    return Table(columns, [(n.node, n.baseline, str(n.status), n.detail()) for n in report.nodes])
