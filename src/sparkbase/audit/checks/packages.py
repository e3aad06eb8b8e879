"""Package checks: pinned versions present, other baselines' packages absent."""

from __future__ import annotations

from sparkbase.audit.checks.common import apply_fix
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, Subject, fail, node_check, ok, skip
from sparkbase.facts.model import NodeFacts


def _package_names(expected: Expected) -> list[str]:
    return list(dict.fromkeys(pin.name for pin in expected.baseline.packages()))


@node_check(
    "package",
    "packages",
    "each pinned package is installed at its version",
    severity="warn",
    items=_package_names,
    section=None,
)
def package(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    name = str(at.item)
    version = next(pin.version for pin in expected.baseline.packages() if pin.name == name)
    seen = facts.packages.get(name)
    if seen != version:
        return fail(version, seen or "not installed", f"apt-get install {name}={version}")
    return ok(version, seen)


@node_check(
    "packages.foreign",
    "packages",
    "no package is installed that only the site's other baselines pin",
    severity="warn",
    section=None,
)
def packages_foreign(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    foreign = expected.foreign_packages
    want = "none installed"
    if not foreign:
        return skip("no other baseline pins a package this one does not")
    found = [f"{name} {facts.packages[name]}" for name in foreign if name in facts.packages]
    if found:
        fix = f"retire them (kernel packages after the reboot): {apply_fix(at, True)}"
        return fail(want, found, fix)
    return ok(want, want)
