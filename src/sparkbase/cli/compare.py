"""Two baselines side by side, only where they differ, and what each difference means.

For each differing field (dotted path): the two values, which baseline breaks the site
contract there, and whether the field is an adoption blocker (kernel and page size,
driver, memory-saver and Secure Boot, NCCL merge setting, transport). `--json` prints
the same as one JSON document (`format` 1).
"""

from __future__ import annotations

import argparse
import json
import sys

from sparkbase.cli.common import add_site_arguments, load_site_or_exit
from sparkbase.compare import compare_baselines, comparison_table, contract_lines
from sparkbase.console import print_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`compare A B [--json] [--site DIR]`."""
    parser.add_argument("a", metavar="A", help="first baseline (e.g. site-stock-6.17-4k)")
    parser.add_argument("b", metavar="B", help="second baseline (e.g. ds41f-7x-64k)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    add_site_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Compare; exit 0, or 2 when a name is not a concrete baseline of the site."""
    site = load_site_or_exit(args)
    for name in (args.a, args.b):
        if name not in site.baselines:
            kind = "abstract" if name in site.abstract_baselines else "unknown"
            print(f"sparkbase: {kind} baseline {name!r} (concrete: {', '.join(sorted(site.baselines))})",
                  file=sys.stderr)
            return 2
    report = compare_baselines(site.rules.contract, args.a, site.baselines[args.a], args.b,
                               site.baselines[args.b])
    if args.json:
        print(json.dumps(report.as_json(), indent=2, sort_keys=True))
    else:
        print_table(comparison_table(report))
        sys.stdout.write("\n".join(contract_lines(report)) + "\n")
    return 0
