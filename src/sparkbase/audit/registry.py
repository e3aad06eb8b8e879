"""The check registry: every check once, by id, with its area, severity and pure function.

A node check may stand for several items (one per sysctl, HCA, rendered file…): its
`items(expected)` names them and its id becomes `base.item` (`fabric.gid.rocep1s0f0`).
Items depend only on what is expected, so the full list of check ids is known before any
node is asked (the testinfra suite parametrizes on it). Fleet checks compare one key
across every reachable node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from sparkbase.audit.expected import Expected
    from sparkbase.facts.model import NodeFacts

Severity = Literal["error", "warn"]
Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class Outcome:
    """What a check function found: its verdict, both sides, and how to fix it."""

    status: Status
    expected: str | None = None
    observed: str | None = None
    fix: str | None = None


def ok(expected: object = None, observed: object = None) -> Outcome:
    """A pass, showing both sides."""
    return Outcome("pass", _text(expected), _text(observed))


def fail(expected: object, observed: object, fix: str) -> Outcome:
    """A failure, with the fix a person should apply."""
    return Outcome("fail", _text(expected), _text(observed), fix)


def skip(reason: str) -> Outcome:
    """Not applicable, or not knowable (the reason says which)."""
    return Outcome("skip", None, reason)


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(str(v) for v in value) or "(none)"
    return str(value)


@dataclass(frozen=True)
class CheckResult:
    """One check on one node (or the fleet, node `None`)."""

    id: str
    area: str
    severity: Severity
    node: str | None
    status: Status
    expected: str | None
    observed: str | None
    fix: str | None

    @property
    def blocking(self) -> bool:
        """A failed error-severity check: drift that refuses a launch."""
        return self.status == "fail" and self.severity == "error"


CheckFn = Callable[["Expected", "NodeFacts", str | None], Outcome]
ItemsFn = Callable[["Expected"], list[str]]


@dataclass(frozen=True)
class NodeCheck:
    """A check of one node against its expectations."""

    id: str
    area: str
    severity: Severity
    summary: str
    fn: CheckFn
    items: ItemsFn | None = None

    def ids(self, expected: Expected) -> list[tuple[str, str | None]]:
        """(check id, item) pairs this check stands for on a node."""
        if self.items is None:
            return [(self.id, None)]
        return [(f"{self.id}.{item}", item) for item in self.items(expected)]

    def run(self, expected: Expected, facts: NodeFacts, item: str | None, check_id: str) -> CheckResult:
        """Run on one node; a crash in a check is reported as that check failing."""
        try:
            outcome = self.fn(expected, facts, item)
        except Exception as exc:  # a check bug must not hide every other result
            outcome = fail(None, f"check crashed: {type(exc).__name__}: {exc}", "report this bug")
        return CheckResult(
            check_id,
            self.area,
            self.severity,
            expected.node,
            outcome.status,
            outcome.expected,
            outcome.observed,
            outcome.fix,
        )


@dataclass(frozen=True)
class FleetCheck:
    """All reachable nodes must agree on one key."""

    id: str
    area: str
    severity: Severity
    summary: str
    key: Callable[[NodeFacts], object]


NODE_CHECKS: dict[str, NodeCheck] = {}
FLEET_CHECKS: dict[str, FleetCheck] = {}


def node_check(
    check_id: str, area: str, summary: str, severity: Severity = "error", items: ItemsFn | None = None
) -> Callable[[CheckFn], CheckFn]:
    """Register a node check (decorator)."""

    def register(fn: CheckFn) -> CheckFn:
        if check_id in NODE_CHECKS:
            raise ValueError(f"check {check_id} registered twice")
        NODE_CHECKS[check_id] = NodeCheck(check_id, area, severity, summary, fn, items)
        return fn

    return register


def fleet_check(
    check_id: str, area: str, summary: str, key: Callable[[NodeFacts], object], severity: Severity = "error"
) -> None:
    """Register a fleet agreement check."""
    FLEET_CHECKS[check_id] = FleetCheck(check_id, area, severity, summary, key)
