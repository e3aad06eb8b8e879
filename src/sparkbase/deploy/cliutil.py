"""What `plan` and `apply` share on the command line: site with assignment, MOK, output."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkbase.console import Table
    from sparkbase.deploy.results import Report
    from sparkbase.deploy.steps import MokFiles
    from sparkbase.model.site import Site


def add_deploy_arguments(parser: argparse.ArgumentParser) -> None:
    """`--baseline`, `--mok-dir`, `--json`."""
    parser.add_argument(
        "--baseline",
        metavar="NAME",
        default=None,
        help="for this run, converge the --limit nodes to baseline NAME instead of the "
        "inventory's (a contract-breaking one needs --override-policy on apply)",
    )
    parser.add_argument(
        "--mok-dir",
        type=Path,
        default=None,
        help="local directory with MOK.der and MOK.priv (the private key is a secret), for "
        "baselines that sign the memory-saver module (default: $SPARKBASE_MOK_DIR; with "
        "--lab, the lab's key pair)",
    )
    parser.add_argument("--json", action="store_true", help="print a machine-readable report")


def site_for_run(site: Site, args: argparse.Namespace, nodes: list[str]) -> Site:
    """The site, with `--baseline` applied to the `--limit` nodes; exit 2 on misuse."""
    from sparkbase.deploy.assign import AssignmentError, with_assignment

    if args.baseline is None:
        return site
    if not args.limit:
        print("sparkbase: --baseline needs --limit NODE… (which nodes move)", file=sys.stderr)
        raise SystemExit(2)
    try:
        return with_assignment(site, nodes, args.baseline)
    except AssignmentError as exc:
        from sparkbase.text import shown

        print(f"sparkbase: {shown(exc)}", file=sys.stderr)
        raise SystemExit(2) from None


def mok_files(args: argparse.Namespace, lab: Path | None) -> MokFiles | None:
    """The MOK key pair named by --mok-dir, else $SPARKBASE_MOK_DIR, else the lab's; a lab
    key for a target that is not the lab exits 2."""
    from sparkbase.deploy.steps import DeployConfigError, MokFiles

    try:
        if args.mok_dir is not None:
            return refuse_lab_key(MokFiles.from_dir(args.mok_dir), lab)
        return mok_dir_from_env(lab)
    except DeployConfigError as exc:
        from sparkbase.text import shown

        print(f"sparkbase: {shown(exc)}", file=sys.stderr)
        raise SystemExit(2) from None


#: the lab's key pair, inside a lab directory (`sparkbase lab up` makes it there)
LAB_MOK_DIR = "mok"
#: what marks a lab key: its certificate's subject CN (sparkbase.lab.mok.LAB_KEY_CN), and
#: the fingerprint of the key pair sparkbase 0.1.0 shipped in its source tree
LAB_KEY_MARK = b"sparkbase lab MOK (not for production)"
RETIRED_LAB_FINGERPRINTS = frozenset({"de:68:7c:66:aa:de:f7:ac:da:f7:f1:c7:c8:0f:80:9d:81:86:73:f1"})


def is_lab_key(mok: MokFiles) -> bool:
    """Whether the certificate is a sparkbase lab key (made for the emulated fleet)."""
    try:
        data = mok.certificate.read_bytes()
    except OSError:
        return False
    return LAB_KEY_MARK in data or mok.fingerprint() in RETIRED_LAB_FINGERPRINTS


def refuse_lab_key(mok: MokFiles | None, lab: Path | None) -> MokFiles | None:
    """`mok`, unless it is a lab key and the target is not the lab (DeployConfigError)."""
    from sparkbase.deploy.steps import DeployConfigError

    if mok is not None and lab is None and is_lab_key(mok):
        raise DeployConfigError(
            f"MOK certificate {mok.certificate} is a sparkbase lab key: it signs for the "
            "emulated fleet only; give the site's own key pair with --mok-dir"
        )
    return mok


def mok_dir_from_env(lab: Path | None) -> MokFiles | None:
    """$SPARKBASE_MOK_DIR, or with a lab the key pair the lab made in its directory
    (`<lab dir>/mok`); a lab key for a target that is not the lab raises DeployConfigError."""
    from sparkbase.deploy.steps import MokFiles

    if os.environ.get("SPARKBASE_MOK_DIR"):
        return refuse_lab_key(MokFiles.from_dir(Path(os.environ["SPARKBASE_MOK_DIR"])), lab)
    if lab is not None:
        return MokFiles.from_dir(lab / LAB_MOK_DIR)
    return None


def check_buildable(site: Site, nodes: list[str], mok: MokFiles | None) -> None:
    """Build every node's steps once before connecting: config problems exit 2."""
    from sparkbase.deploy.steps import DeployConfigError, build_steps

    for node in nodes:
        try:
            build_steps(site, node, mok)
        except DeployConfigError as exc:
            from sparkbase.text import shown

            print(f"sparkbase: {shown(node)}: {shown(exc)}", file=sys.stderr)
            raise SystemExit(2) from None


def print_report(report: Report, as_json: bool, details: bool) -> None:
    """The report: JSON on stdout, or per-node changes (and diffs) and a summary. Names,
    reasons and notes are shown escaped; a diff line keeps its tabs (`sparkbase.text`)."""
    from sparkbase.text import shown

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
    from sparkbase.console import print_table

    print_table(summary_table(report))


#: a node's status in colour on a terminal
STATUS_STYLES = {
    "unchanged": "green", "changed": "green", "would change": "yellow", "reboot pending": "yellow",
    "failed": "bold red", "unreachable": "bold red", "not started": "dim", "locked": "bold red",
}


def summary_table(report: Report) -> Table:
    """One row per node: its baseline, where it ended up, and the detail (changes, the
    reboot it needs or had, why it stopped)."""
    from sparkbase.console import Column, Table

    columns = (
        Column("NODE", wrap=False),
        Column("BASELINE"),
        Column("STATUS", styles=STATUS_STYLES, wrap=False),
        Column("DETAIL"),
    )
    return Table(columns, [(n.node, n.baseline, str(n.status), n.detail()) for n in report.nodes])
