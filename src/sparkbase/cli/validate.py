"""Load and validate the site; print every problem (errors and warnings) at once.

Each problem is printed as `FILE:LINE:COL: field.path: message`, warnings marked as such,
then a one-line summary. Every placeholder value (a `sources:` entry of kind placeholder)
is one warning at its entry's line, and the summary counts them; `--json` lists them
under `placeholders`. Exit 0 when the site is valid (warnings allowed), 2 when not.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sparkbase.cli.common import add_site_arguments
from sparkbase.errors import ConfigError, Problem, Severity
from sparkbase.model.site import Site, load_site
from sparkbase.model.site_files import find_site_root

#: bump when the JSON shape printed by `validate --json` changes
VALIDATE_FORMAT = 2  # 2: `placeholders`
#: how a placeholder warning reads (rules.py `_provenance_findings`)
PLACEHOLDER_PREFIX = "placeholder: "


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`validate [--site DIR] [--inventory F] [--json]`."""
    add_site_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")


def run(args: argparse.Namespace) -> int:
    """Validate; exit 0 (valid, maybe with warnings) or 2 (invalid)."""
    site: Site | None = None
    try:
        root = find_site_root(args.site)
        site = load_site(root, args.inventory)
        problems = list(site.warnings)
    except ConfigError as exc:
        problems = list(exc.problems)
    errors = [p for p in problems if p.severity is Severity.ERROR]
    if args.json:
        print(json.dumps(_as_json(site, problems), indent=2, sort_keys=True))
    else:
        here = Path.cwd()
        for problem in problems:
            print(problem.format(here))
        print(_summary(site, len(errors), len(problems) - len(errors), len(_placeholders(problems))))
    return 0 if site is not None and not errors else 2


def _placeholders(problems: list[Problem]) -> list[Problem]:
    """The warnings that are placeholder sources entries, in file and line order."""
    found = [p for p in problems if p.severity is Severity.WARNING
             and (p.path.startswith("sources.") or ".sources." in p.path)  # a baseline's, a trigger's
             and p.message.startswith(PLACEHOLDER_PREFIX)]
    return sorted(found, key=lambda p: (str(p.file), p.line))


def _summary(site: Site | None, errors: int, warnings: int, placeholders: int) -> str:
    if site is None:
        return f"sparkbase: the site is invalid: {errors} error(s), {warnings} warning(s)"
    assigned = sorted({node.baseline for node in site.inventory.nodes.values()})
    return (
        f"sparkbase: the site is valid ({warnings} warning(s), {placeholders} placeholder value(s) "
        "to confirm): "
        f"{len(site.baselines)} baseline(s) ({', '.join(sorted(site.baselines))}; "
        f"{len(site.abstract_baselines)} abstract), "
        f"{len(site.inventory.nodes)} node(s) on {', '.join(assigned)}, "
        f"{len(site.lanes)} lane(s) ({sum(1 for lane in site.lanes.values() if lane.enabled)} enabled)"
    )


def _as_json(site: Site | None, problems: list[Problem]) -> dict[str, Any]:
    summary: dict[str, Any] | None = None
    if site is not None:
        summary = {
            "baselines": sorted(site.baselines),
            "abstract_baselines": sorted(site.abstract_baselines),
            "nodes": {name: node.baseline for name, node in sorted(site.inventory.nodes.items())},
            "lanes": {name: lane.enabled for name, lane in sorted(site.lanes.items())},
        }
    return {
        "format": VALIDATE_FORMAT,
        "valid": site is not None,
        "problems": [{"file": str(p.file), "line": p.line, "column": p.column, "path": p.path,
                      "message": p.message, "severity": str(p.severity)} for p in problems],
        "placeholders": [{"file": str(p.file), "line": p.line, "key": p.path.removeprefix("sources."),
                          "note": p.message.removeprefix(PLACEHOLDER_PREFIX)}
                         for p in _placeholders(problems)],
        "summary": summary,
    }

