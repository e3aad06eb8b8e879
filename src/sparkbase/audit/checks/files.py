"""Rendered-file and stamp checks."""

from __future__ import annotations

from sparkbase.audit.checks.common import apply_fix
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, fail, node_check, ok, skip
from sparkbase.facts.model import NodeFacts
from sparkbase.render import NCCL_CONF_PATH, NETPLAN_PATH

_OWN_CHECKS = {NCCL_CONF_PATH, NETPLAN_PATH}


def _other_files(expected: Expected) -> list[str]:
    return [f.path for f in expected.files if f.path not in _OWN_CHECKS and f.path != expected.stamp_path]


@node_check(
    "file", "files", "every other rendered file is byte for byte the rendered one", items=_other_files
)
def rendered_file(expected: Expected, facts: NodeFacts, item: str | None) -> Outcome:
    rendered = expected.file(str(item))
    assert rendered is not None
    seen = facts.file_sha256.get(rendered.path)
    if seen != rendered.sha256:
        return fail(
            f"sha256 {rendered.sha256}",
            f"sha256 {seen}" if seen else "missing",
            f"rewrite it ({rendered.purpose}): {apply_fix(expected, rendered.needs_reboot)}",
        )
    return ok(rendered.sha256, seen)


@node_check("stamp", "files", "the stamp names the baseline, version and hash the node must carry")
def stamp(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    want_version = expected.baseline.version
    want = f"{expected.baseline_name} {want_version}"
    rendered = expected.file(expected.stamp_path)
    if facts.stamp is None:
        return fail(want, "no stamp (never converged by sparkbase)", apply_fix(expected, True))
    import json

    want_stamp = json.loads(rendered.content) if rendered else {}
    seen = f"{facts.stamp.get('baseline')} {facts.stamp.get('version')}"
    mismatched = [
        key
        for key in ("baseline", "version", "baseline_sha256", "files_sha256")
        if facts.stamp.get(key) != want_stamp.get(key)
    ]
    if mismatched:
        detail = seen
        if not set(mismatched) & {"baseline", "version"}:
            detail += (
                f" but {', '.join(mismatched)} differ (the baseline changed without a version "
                "bump, or the node was converged from another checkout)"
            )
        return fail(want, detail, apply_fix(expected, True))
    return ok(want, seen)


@node_check(
    "stamp.assignment", "files", "the node was converged to the baseline the inventory assigns",
    severity="warn",
)
def stamp_assignment(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    assigned = expected.inventory_baseline or expected.baseline_name
    want = f"{assigned} (the inventory's)"
    if expected.baseline_name != assigned:
        want += f"; audited against {expected.baseline_name}"
    if facts.stamp is None:
        return skip("no stamp (the stamp check reports it)")
    seen = str(facts.stamp.get("baseline"))
    if seen == assigned:
        return ok(want, seen)
    if seen == expected.baseline_name:
        fix = (f"the node carries {seen} (apply --baseline): assign it in the inventory, or move the node "
               f"back: {apply_fix(expected, True)}")
    else:
        fix = f"the node carries neither; converge it: {apply_fix(expected, True)}"
    return fail(want, f"stamp names {seen}", fix)
