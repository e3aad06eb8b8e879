"""Rendered-file and stamp checks."""

from __future__ import annotations

import json

from sparkbase.audit.checks.common import apply_fix, linked
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, Subject, fail, node_check, ok, skip
from sparkbase.facts.model import NodeFacts
from sparkbase.render import NCCL_CONF_PATH, NETPLAN_PATH

_OWN_CHECKS = {NCCL_CONF_PATH, NETPLAN_PATH}
#: the stamp fields that must equal the rendered stamp's
_STAMP_KEYS = ("baseline", "version", "baseline_sha256", "files_sha256")


def _other_files(expected: Expected) -> list[str]:
    """Rendered files other than those with checks of their own (the fabric netplan, whole or
    merged into the site's file, and nccl.conf) and the stamp."""
    return [f.path for f in expected.files
            if f.path not in _OWN_CHECKS and f.path != expected.stamp_path and not f.merged]


@node_check(
    "file", "files", "every other rendered file is byte for byte the rendered one", items=_other_files,
    section=None, written=True,
)
def rendered_file(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    rendered = expected.file(str(at.item))
    assert rendered is not None
    link = linked(facts, rendered.path, f"sha256 {rendered.sha256}")
    if link is not None:
        return link
    seen = facts.file_sha256.get(rendered.path)
    if seen != rendered.sha256:
        return fail(
            f"sha256 {rendered.sha256}",
            f"sha256 {seen}" if seen else "missing",
            f"rewrite it ({rendered.purpose}): {apply_fix(at, rendered.needs_reboot)}",
        )
    return ok(rendered.sha256, seen)


@node_check("stamp", "files", "the stamp names the baseline, version and hash the node must carry",
            section=None, written=True)
def stamp(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    want = f"{expected.baseline_name} {expected.baseline.version}"
    link = linked(facts, expected.stamp_path, want)
    if link is not None:
        return link
    if facts.stamp is None:
        return fail(want, "no stamp (never converged by sparkbase)", apply_fix(at, True))
    seen = f"{facts.stamp.get('baseline')} {facts.stamp.get('version')}"
    rendered = expected.file(expected.stamp_path)
    want_stamp = json.loads(rendered.content) if rendered else {}
    mismatched = [key for key in _STAMP_KEYS if facts.stamp.get(key) != want_stamp.get(key)]
    if mismatched:
        detail = seen
        if not set(mismatched) & {"baseline", "version"}:
            detail += (
                f" but {', '.join(mismatched)} differ (the baseline changed without a version "
                "bump, or the node was converged from another checkout)"
            )
        return fail(want, detail, apply_fix(at, True))
    return ok(want, seen)


@node_check(
    "stamp.assignment", "files", "the node was converged to the baseline the inventory assigns",
    severity="warn", section=None, written=True,
)
def stamp_assignment(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    assigned, audited = expected.inventory_baseline or expected.baseline_name, expected.baseline_name
    want = f"{assigned} (the inventory's)"
    if audited != assigned:
        want += f"; audited against {audited}"
    if facts.stamp is None:
        return skip("no stamp (the stamp check reports it)")
    seen = str(facts.stamp.get("baseline"))
    if seen == assigned:
        return ok(want, seen)
    if seen == audited:
        fix = (f"the node carries {seen} (apply --baseline): assign it in the inventory, or move the node "
               f"back: {apply_fix(at, True)}")
    else:
        fix = f"the node carries neither; converge it: {apply_fix(at, True)}"
    return fail(want, f"stamp names {seen}", fix)
