"""Package checks: pinned versions present, other baselines' packages absent."""

from __future__ import annotations

from sparkbase.audit.checks.common import apply_fix
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, fail, node_check, ok, skip
from sparkbase.facts.model import NodeFacts


def _package_names(expected: Expected) -> list[str]:
    return list(dict.fromkeys(pin.name for pin in expected.baseline.packages()))


@node_check(
    "package",
    "packages",
    "each pinned package is installed at its version",
    severity="warn",
    items=_package_names,
)
def package(expected: Expected, facts: NodeFacts, item: str | None) -> Outcome:
    pin = next(pin for pin in expected.baseline.packages() if pin.name == item)
    seen = facts.packages.get(pin.name)
    if seen != pin.version:
        return fail(pin.version, seen or "not installed", f"apt-get install {pin.name}={pin.version}")
    return ok(pin.version, seen)


@node_check(
    "packages.foreign",
    "packages",
    "no package is installed that only the site's other baselines pin",
    severity="warn",
)
def packages_foreign(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    want = "none installed"
    if not expected.foreign_packages:
        return skip("no other baseline pins a package this one does not")
    found = [f"{name} {facts.packages[name]}" for name in expected.foreign_packages if name in facts.packages]
    if found:
        fix = f"retire them (kernel packages after the reboot): {apply_fix(expected, True)}"
        return fail(want, found, fix)
    return ok(want, want)
