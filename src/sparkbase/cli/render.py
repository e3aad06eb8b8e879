"""Write the files each node must carry, under OUT/<node>/<absolute path>.

Files keep the mode they are rendered with; lines sparkbase owns inside a shared file
(the swap entry of /etc/fstab) are written as a fragment, e.g. OUT/<node>/etc/fstab.sparkbase-managed.
Sections a node's baseline leaves as found (`managed:`) have no file sparkbase writes: they
are not rendered, and the line per node says so.
Rendering is deterministic (byte-identical on re-run) and all or nothing: every node is
rendered in memory first, and nothing is written when the site is invalid, a node cannot
be rendered or an output directory is not a previous render (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sparkbase.cli.common import add_site_arguments, load_site_or_exit
from sparkbase.model.sections import as_found_text
from sparkbase.release import export_nodes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`render [NODE…] --out DIR [--site DIR]`."""
    parser.add_argument("nodes", nargs="*", metavar="NODE", help="nodes to render (default: all)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory")
    add_site_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Render; exit 0, or 2 for an invalid site, an unknown node or an unwritable output."""
    site = load_site_or_exit(args)
    known = sorted(site.inventory.nodes, key=lambda name: site.inventory.nodes[name].rank)
    unknown = [name for name in args.nodes if name not in site.inventory.nodes]
    if unknown:
        print(f"sparkbase: no node {', '.join(map(repr, unknown))} in the inventory "
              f"(have: {', '.join(known)}); nothing was rendered", file=sys.stderr)
        return 2
    chosen = [name for name in known if not args.nodes or name in args.nodes]
    try:
        written = export_nodes(site, chosen, args.out)
    except (OSError, ValueError) as exc:
        print(f"sparkbase: {exc}; nothing was written", file=sys.stderr)
        return 2
    for node in chosen:
        baseline = site.baseline_of(node)
        unmanaged = baseline.unmanaged()
        print(f"{node}: {len(written[node])} file(s) under {args.out / node} "
              f"({baseline.version} of {site.inventory.nodes[node].baseline})"
              + (f"; not rendered ({as_found_text(unmanaged)})" if unmanaged else ""))
    return 0
