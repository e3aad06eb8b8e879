"""Capture a baseline from a live node: one SSH round trip, every value it pins as the node
has it (kernel release, page size, command line, package versions, linux-tools, fallback
kernel, driver, NCCL library sha256, sysctls, THP, swap, the installer's swap line, the
memory saver's DKMS build, srcversion and packing, fan control's DKMS module and daemon,
the nvidia-drm options package purged, CPU governor, NVMe coalescing, services, slice,
GRUB default, MOK fingerprint), each marked `captured` (node, time) in the file's
`sources:`. A value the node contradicts (a service it runs, a governor it does not) is
dropped and said; what it cannot tell is kept and said.

The file is baselines/NAME.yaml of the site (`--as NAME`, default captured-NODE) or
`--out FILE`. An existing file is updated in place, keeping its comments and every value
the node cannot tell; a new one starts from the node's baseline (or `--from`). The result
is validated with the site before it is written (atomically). Exit 0 written, 2 bad
configuration or a target that is not a baseline, 3 the node was unreachable.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from sparkbase.atomicfile import write_atomic
from sparkbase.audit.expected import expected_for
from sparkbase.boundedfile import FileRefused
from sparkbase.capture import NotABaseline, capture_plan, captured_values, check_baseline_text, write_captured
from sparkbase.capture.core import Capture
from sparkbase.cli.common import add_lab_arguments, add_site_arguments, lab_path, load_site_or_exit
from sparkbase.errors import ConfigError
from sparkbase.facts.collect import gather_node
from sparkbase.facts.model import Unreachable
from sparkbase.model.site import LOCK_FILE, Site, _valid_name, load_site
from sparkbase.model.site_files import SITE_RULES_FILE
from sparkbase.model.yamlio import load_yaml, read_site_file
from sparkbase.text import shown
from sparkbase.transport import ssh_targets


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `sparkbase capture`."""
    parser.add_argument("node", metavar="NODE", help="inventory node to read")
    parser.add_argument("--as", dest="name", metavar="NAME", default=None,
                        help="write baselines/NAME.yaml of the site (default: captured-NODE)")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE",
                        help="write FILE instead (its name, less .yaml, is the baseline's name)")
    parser.add_argument("--from", dest="start", metavar="BASELINE", default=None,
                        help="a new file starts from this baseline, which says what to read "
                        "(default: the inventory's; give the one a node was moved to with apply "
                        "--baseline)")
    add_site_arguments(parser)
    add_lab_arguments(parser, "the node")


def _fail(message: str, status: int = 2) -> int:
    print(f"sparkbase: capture: {shown(message)}", file=sys.stderr)
    return status


def run(args: argparse.Namespace) -> int:
    """Read the node, write the baseline, say what was captured and what was not."""
    site = load_site_or_exit(args)
    node = args.node
    if node not in site.inventory.nodes:
        return _fail(f"no node {node} in the inventory (have: {', '.join(sorted(site.inventory.nodes))})")
    name = args.out.name.removesuffix(".yaml") if args.out is not None else (args.name or f"captured-{node}")
    target = args.out if args.out is not None else site.root / "baselines" / f"{name}.yaml"
    if args.out is not None and args.name is not None and args.name != name:
        return _fail(f"--as {args.name} and --out {args.out} name two baselines; give one")
    if not _valid_name(name) or f"{name}.yaml" == SITE_RULES_FILE or name == LOCK_FILE:
        return _fail(f"{target}: '{name}' cannot be a baseline's name")
    existing: str | None = None
    if target.exists() or target.is_symlink():
        try:
            raw = read_site_file(target)
            load_yaml(target)  # bounded, strict YAML; a located problem (exit 2) if not
            existing = raw.decode("utf-8")
            check_baseline_text(existing)
        except (FileRefused, NotABaseline) as exc:
            return _fail(f"{target}: {exc}; refusing to write over it")
        except UnicodeDecodeError:
            return _fail(f"{target}: not UTF-8 text, not a baseline; refusing to write over it")
        except ConfigError as exc:
            for problem in exc.problems:
                print(problem.format(Path.cwd()), file=sys.stderr)
            return _fail(f"{target}: not a readable YAML baseline; refusing to write over it")
    start = args.start or site.inventory.nodes[node].baseline
    if start not in site.baselines:
        return _fail(f"--from {start}: no such concrete baseline in the site")
    judged = name if existing is not None and name in site.baselines else start
    expected = expected_for(site, node, judged)
    targets = ssh_targets(site, lab_path(args))
    facts = gather_node(node, targets[node], capture_plan(expected.plan()))
    if isinstance(facts, Unreachable):
        return _fail(f"{node} unreachable: {facts.reason}", 3)
    capture = captured_values(facts, expected.baseline)
    when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if existing is None:
        template = read_site_file(site.root / "baselines" / f"{start}.yaml").decode("utf-8")
        description = f"captured from {node} at {when}; values a node cannot tell from {start}"
        text = write_captured(template, capture, node, when, description[:500])
    else:
        text = write_captured(existing, capture, node, when)
    refusals = _validate_in_site(site, name, text)
    if refusals:
        for refusal in refusals:
            print(refusal, file=sys.stderr)
        return _fail(f"the captured baseline does not validate; {target} was not written")
    try:
        write_atomic(target, text)
    except OSError as exc:
        return _fail(f"{target}: cannot write: {exc.strerror}")
    _report(node, target, capture, existing is None)
    return 0


def _report(node: str, target: Path, capture: Capture, new: bool) -> None:
    verb = "wrote" if new else "updated"
    print(f"capture {shown(node)}: {verb} {shown(target)}: {len(capture.values)} value(s) captured")
    for item in capture.dropped:
        print(f"  dropped {shown(item)}")
    for item in capture.missing:
        print(f"  not captured (kept as it was): {shown(item)}")


def _validate_in_site(site: Site, name: str, text: str) -> list[str]:
    """Problems of the site with `text` as baselines/NAME.yaml (a private copy is loaded)."""
    with tempfile.TemporaryDirectory(prefix="sparkbase-capture-") as temp:
        root = Path(temp)
        for part in ("baselines", "lanes"):
            if (site.root / part).is_dir():
                shutil.copytree(site.root / part, root / part, symlinks=True)
        (root / "baselines" / f"{name}.yaml").write_text(text, encoding="utf-8")
        try:
            load_site(root, site.inventory_file)
        except ConfigError as exc:
            return [p.format(root) for p in exc.problems if p.severity.value == "error"]
    return []
