"""Write a starter site (the shipped example: baselines/, inventory/, lanes/) into DIR.

Its files are commented: each value says where it comes from, and the placeholders the
site must confirm are listed by `sparkbase validate`. DIR must be empty or missing; with
--force, missing starter files are added and files init wrote before (unchanged since) are
refreshed, but a file init did not write is never overwritten. Exit 0 when every starter
file is in place, 1 when some file was kept because it was not init's, 2 on a refused DIR.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sparkbase.starter import StarterMissing, starter_files
from sparkbase.starter.write import InitRefused, Outcome, write_starter
from sparkbase.text import shown


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`init DIR [--force]`."""
    parser.add_argument("dir", type=Path, metavar="DIR", help="where to write the site (empty or missing)")
    parser.add_argument("--force", action="store_true",
                        help="write into a non-empty DIR: add missing files, refresh files init wrote "
                        "and you did not change; never overwrite anything else")


def _next_steps(target: Path) -> str:
    return (
        "next:\n"
        f"  cd {target}\n"
        "  sparkbase validate       # every problem, and every placeholder value to confirm\n"
        "  sparkbase lock           # record each baseline's version and render hash\n"
        "  fill inventory/ssh_config and inventory/known_hosts (see inventory/site.yaml)\n"
        "  or try it on an emulated fleet (root): sparkbase lab up; sparkbase apply --lab --yes"
    )


def run(args: argparse.Namespace) -> int:
    """Write the starter site; report what was written and what was kept."""
    target: Path = args.dir
    try:
        report = write_starter(target, starter_files(), args.force)
    except (InitRefused, StarterMissing, OSError) as exc:  # a starter missing is a broken install
        print(f"sparkbase: init: {shown(exc)}", file=sys.stderr)
        return 70 if isinstance(exc, StarterMissing) else 2
    for outcome in (Outcome.WRITTEN, Outcome.REPLACED):
        for rel in report.with_outcome(outcome):
            print(f"{outcome.value}: {rel}")
    kept = report.with_outcome(Outcome.KEPT)
    for rel in kept:
        print(f"sparkbase: init: kept {target / rel}: not written by init (or changed since); "
              "not overwritten", file=sys.stderr)
    placed = len(report.outcomes) - len(kept)
    print(f"sparkbase: starter site in {target}: {placed} of {len(report.outcomes)} file(s) in place")
    if kept:
        return 1
    print(_next_steps(target))
    return 0
