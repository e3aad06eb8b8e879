"""Options and helpers shared by the sub-commands (import-light).

`sparkbase --help` imports this module, so what only a command needs is imported where it
is used: the typed model (`sparkbase.model.site`, pydantic: 0.24 s), the transport (30 ms),
the override log (20 ms).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from sparkbase.errors import ConfigError
from sparkbase.model.site_files import find_site_root
from sparkbase.text import shown

if TYPE_CHECKING:
    from sparkbase.model.site import Site


#: `--log-level` choices (sparkbase.cli.logs configures them; not imported before a command runs)
LOG_LEVELS = ("debug", "info", "warning", "error")

class _TakesArguments(Protocol):
    """A parser or an argument group."""

    def add_argument(self, *names: str, **settings: Any) -> Any:
        """Add one option."""


def add_global_options(parser: _TakesArguments, with_defaults: bool) -> None:
    """`--debug`, `--no-color`, `--log-level`, `--log-file`: accepted before the command and
    after it (`sparkbase --no-color audit` or `sparkbase audit --no-color`). Only the main
    parser sets defaults, so a command's parser never overwrites what was given before it."""

    def default(value: object) -> object:
        return value if with_defaults else argparse.SUPPRESS

    parser.add_argument("--debug", action="store_true",
                        default=default(bool(os.environ.get("SPARKBASE_DEBUG"))),
                        help="on an internal error (exit 70), print the traceback too "
                        "(also: $SPARKBASE_DEBUG=1)")
    parser.add_argument("--no-color", action="store_true", default=default(False),
                        help="plain text only: no colour, no table borders, no live progress "
                        "(also: $NO_COLOR set, or output not a terminal)")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default=default(None),
                        help="log records shown on stderr (default: warning) and kept in --log-file "
                        "(default: info)")
    parser.add_argument("--log-file", type=Path, metavar="FILE", default=default(None),
                        help="append log records to FILE (created 0600; a symbolic link or non-regular file "
                        "is refused)")


def add_site_arguments(parser: argparse.ArgumentParser) -> None:
    """`--site DIR` and `--inventory FILE`: which site to load."""
    parser.add_argument("--site", type=Path, default=Path("."),
                        help="site directory holding baselines/, inventory/, lanes/ "
                        "(default: here or a parent)")
    parser.add_argument("--inventory", type=Path, default=None,
                        help="inventory file relative to the site (default: inventory/site.yaml)")


def add_lab_arguments(parser: argparse.ArgumentParser, reach: str = "the nodes") -> None:
    """`--lab` (a plain flag) and `--lab-dir DIR`: reach the emulated fleet instead of the
    inventory's addresses. `--lab` takes no value, so `preflight --lab LANE` reads LANE as the
    lane; `--lab-dir` alone implies `--lab`."""
    parser.add_argument("--lab", action="store_true",
                        help=f"reach {reach} of the emulated fleet (its ssh_config and known_hosts) "
                        "instead of the inventory's")
    parser.add_argument("--lab-dir", metavar="DIR", default=None,
                        help="the lab directory for --lab (implies --lab; default: $SPARKBASE_LAB_DIR or "
                        "/var/lib/sparkbase/lab)")


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """`--lab`, `--lab-dir DIR` and `--limit NODE…`: which nodes, reached how."""
    add_lab_arguments(parser)
    parser.add_argument("--limit", nargs="+", metavar="NODE", default=None, help="only these nodes")


def fail(message: str) -> NoReturn:
    """Say what is wrong with the command line or its input (`sparkbase: MESSAGE`) and exit 2."""
    print(f"sparkbase: {shown(message)}", file=sys.stderr)
    raise SystemExit(2)


def load_site_or_exit(args: argparse.Namespace) -> Site:
    """Load the site named by the arguments; on problems print them all and exit 2."""
    from sparkbase.model.site import load_site  # pydantic: see the module's docstring

    started = time.monotonic()
    try:
        root = find_site_root(args.site)
        site = load_site(root, args.inventory, cache=True)
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem.format(Path.cwd()), file=sys.stderr)
        errors = sum(1 for p in exc.problems if p.severity == "error")
        fail(f"{errors} error(s) in the site; nothing was done")
    logging.getLogger(__name__).debug("site %s loaded in %.3fs (%d baselines, %d nodes, %d lanes)", root,
                                      time.monotonic() - started, len(site.baselines),
                                      len(site.inventory.nodes), len(site.lanes))
    return site


def lab_path(args: argparse.Namespace) -> Path | None:
    """The lab directory when `--lab` or `--lab-dir` was given, else None."""
    from sparkbase.transport import lab_dir

    explicit = getattr(args, "lab_dir", None)
    if not getattr(args, "lab", False) and explicit is None:
        return None
    return lab_dir(explicit)


def selected_nodes(site: Site, args: argparse.Namespace) -> list[str]:
    """Nodes named by `--limit` (checked against the inventory), else all, in rank order."""
    nodes = sorted(site.inventory.nodes, key=lambda name: site.inventory.nodes[name].rank)
    limit = getattr(args, "limit", None)
    if not limit:
        return nodes
    unknown = [name for name in limit if name not in nodes]
    if unknown:
        fail(f"no node {', '.join(unknown)} in the inventory (have: {', '.join(nodes)})")
    return [name for name in nodes if name in limit]


def lane_or_exit(site: Site, lane: str) -> str:
    """`lane` when the site has it; otherwise say which lanes it has and exit 2."""
    if lane not in site.lanes:
        fail(f"no lane {lane} (have: {', '.join(sorted(site.lanes))})")
    return lane


def reason_or_exit(text: str | None, option: str) -> str | None:
    """The checked reason given with `option` (None when it was not given); a reason with no
    visible text exits 2, naming the option."""
    if text is None:
        return None
    from sparkbase.policy.overrides import ReasonError, checked_reason

    try:
        return checked_reason(text)
    except ReasonError as exc:
        fail(f"{option}: {exc}")
