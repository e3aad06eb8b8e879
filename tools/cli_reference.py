"""The CLI reference (docs/cli.md), generated from the argument parser itself.

    .venv/bin/python tools/cli_reference.py > docs/cli.md

A unit test fails when docs/cli.md no longer matches the parser, so the reference cannot
drift from the code.
"""

from __future__ import annotations

import argparse
import os
import sys

from sparkbase.cli.main import build_parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(parser: argparse.ArgumentParser) -> str:
    # a fixed width keeps the text identical whatever terminal generates it
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return parser.format_help().rstrip()
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def render_reference() -> str:
    """Markdown: the top-level help, then each command's (and each sub-command's) help."""
    parser = build_parser()
    parser.prog = "sparkbase"
    out = [
        "# sparkbase command reference",
        "",
        "Generated from the CLI by `python tools/cli_reference.py`; do not edit by hand.",
        "",
        "```text",
        _help(parser),
        "```",
    ]
    for name, command in _subparsers(parser).items():
        out += ["", f"## sparkbase {name}", "", "```text", _help(command), "```"]
        for sub_name, sub in _subparsers(command).items():
            out += ["", f"### sparkbase {name} {sub_name}", "", "```text", _help(sub), "```"]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_reference())
