"""Record (or, with --check, verify) each baseline's version and render digest.

The lock is `baselines/sparkbase.lock` (JSON with a format version, written atomically).
`--check` exits 1 naming every baseline whose rendered output changed while its version
did not ("bump version in baselines/X.yaml"), every baseline missing from the lock and
every stale entry; it also exits 1 while a concrete baseline has placeholder values or
values with no source (`sources:`), unless --allow-placeholders (a lab or demo site).
Without --check, the lock is rewritten, except that a changed baseline
whose version was not bumped is refused (exit 1) unless --force is given.

Once the site keeps qualified releases (a `releases/` directory, `sparkbase qualify`),
--check also reports every enabled lane without a release (the launch gate does not hold it
to one yet) and every lane whose declared baseline, image and settings match none of its
releases (preflight refuses it until it is qualified); these lines do not change the exit
status: a candidate is declared in the site before it can be qualified on the nodes.
"""

from __future__ import annotations

import argparse
import sys

from sparkbase.atomicfile import write_atomic
from sparkbase.cli.common import add_site_arguments, load_site_or_exit
from sparkbase.gate.records import RELEASES_DIR, RecordError, list_releases, shape_of
from sparkbase.model.coverage import unconfirmed
from sparkbase.model.site import Site
from sparkbase.release import (
    LOCK_PATH,
    IssueKind,
    LockFileError,
    check_lock,
    current_entries,
    lock_text,
    read_lock,
)
from sparkbase.text import shown


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`lock [--check] [--force] [--site DIR]`."""
    parser.add_argument("--check", action="store_true", help="verify the lock; change nothing")
    parser.add_argument("--force", action="store_true",
                        help="record changed baselines even when their version was not bumped")
    parser.add_argument("--allow-placeholders", action="store_true",
                        help="with --check: accept baselines whose values are placeholders or unsourced "
                        "(lab/demo sites)")
    add_site_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Check or write the lock; exit 0 (lock holds / written), 1 (refused) or 2 (bad input)."""
    site = load_site_or_exit(args)
    path = site.root / LOCK_PATH
    try:
        recorded = read_lock(path)
    except LockFileError as exc:
        print(f"sparkbase: {shown(exc)}", file=sys.stderr)
        if args.check or not args.force:
            return 2
        recorded = None
    current = current_entries(site)
    issues = check_lock(recorded, current)
    if args.check:
        if recorded is None:
            print(f"sparkbase: no lock at {path}; run `sparkbase lock`", file=sys.stderr)
        for issue in issues:
            print(f"sparkbase: {shown(issue.message)}", file=sys.stderr)
        _report_releases(site)
        if issues:
            print(f"sparkbase: the lock does not hold ({len(issues)} baseline(s))", file=sys.stderr)
            return 1
        return _check_sources(site, args.allow_placeholders, len(current))
    unbumped = [issue for issue in issues if issue.kind is IssueKind.UNBUMPED]
    if unbumped and not args.force:
        for issue in unbumped:
            print(f"sparkbase: {shown(issue.message)}", file=sys.stderr)
        print("sparkbase: lock not written (--force records the change anyway)", file=sys.stderr)
        return 1
    write_atomic(path, lock_text(current).encode())
    for name, entry in current.items():
        print(f"{shown(name)} {shown(entry.version)} {entry.digest[:16]}")
    print(f"sparkbase: wrote {path}")
    return 0


def _check_sources(site: Site, allow: bool, count: int) -> int:
    """Refuse a release whose baselines still carry placeholders or unsourced values."""
    pending = [item for name in sorted(site.baselines) for item in unconfirmed(name, site.baselines[name])]
    if pending and not allow:
        for item in pending:
            print(f"sparkbase: {shown(item.message())}", file=sys.stderr)
        print(f"sparkbase: the lock holds, but {len(pending)} value(s) are not confirmed by any source: "
              "replace them (`sparkbase capture`, or a site/recipe entry in sources:), or pass "
              "--allow-placeholders for a lab or demo site", file=sys.stderr)
        return 1
    note = f" ({len(pending)} placeholder value(s) allowed)" if pending else ""
    print(f"sparkbase: the lock holds for {count} baseline(s){note}")
    return 0


def _report_releases(site: Site) -> None:
    """The lanes the release gate does not hold yet, and those no release qualified as
    declared (stderr; nothing without a `releases/` directory)."""
    if not (site.root / RELEASES_DIR).is_dir():
        return
    for name, lane in sorted(site.lanes.items()):
        if not lane.enabled:
            continue
        try:
            found = list_releases(site.root, name)
        except RecordError as exc:
            print(f"sparkbase: lane {shown(name)}: {shown(exc)}", file=sys.stderr)
            continue
        if not found:
            print(f"sparkbase: lane {shown(name)} has no qualified release: the launch gate does not hold it "
                  f"to one yet (`sparkbase qualify {shown(name)}` records the first)", file=sys.stderr)
        elif lane.baseline in site.baselines:
            shape = shape_of(site, name)
            if not any(shape.matches(release.shape) for release in found):
                differs = "; ".join(shape.differences(found[-1].shape, found[-1].name))
                print(f"sparkbase: lane {shown(name)}: as declared it matches none of its {len(found)} "
                      f"qualified release(s) ({shown(differs)}); preflight refuses it until it is qualified",
                      file=sys.stderr)
