"""The check registry: every check once, by id, with its area, severity and its judge.

Each node check is one pure function of what the node should be (`Expected`, the typed
model) and what it is (its `NodeFacts`), for one item of the node (`Subject`).

A node check may stand for several items (one per sysctl, HCA, rendered file…): its
`items(expected)` names them and its id becomes `base.item` (`fabric.gid.rocep1s0f0`).
Items depend only on what is expected, so the full list of check ids is known before any
node is asked (the testinfra suite parametrizes on it). Fleet checks compare one key
across every reachable node.

Each node check names the baseline section whose steps fix it (`section`; None when no one
section does: the stamp, a latched GPU clock, the OS release, packages of every section),
and whether it judges the content of what sparkbase writes (`written`) rather than an
effective value on the node. On a node whose baseline leaves that section as found
(`managed:`, `sparkbase.model.sections`) a written check is not judged (a skip saying so;
the stamp and rendered files when the baseline manages nothing), and a failing effective
check says that apply changes nothing there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from sparkbase.audit.expected import Expected
    from sparkbase.facts.model import NodeFacts
    from sparkbase.model.sections import Section

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


@dataclass(frozen=True)
class Subject:
    """The node (and item) a check is judging: what its fix texts name."""

    node: str
    item: str | None = None


#: the verdict on one node: what it should be, its facts, and the node (and item) judged
JudgeFn = Callable[["Expected", "NodeFacts", Subject], Outcome]
ItemsFn = Callable[["Expected"], list[str]]


@dataclass(frozen=True)
class PlannedCheck:
    """One check as planned on one node: its id (`base.item`), the registered check and the item."""

    id: str
    check: str
    item: str | None


@dataclass(frozen=True)
class NodeCheck:
    """A check of one node: its `judge` (pure: what the node should be and its facts), the
    section whose steps fix it, and whether it judges what sparkbase writes (`written`) or
    an effective value."""

    id: str
    area: str
    severity: Severity
    summary: str
    judge: JudgeFn
    items: ItemsFn | None = None
    section: Section | None = None
    written: bool = False

    def ids(self, expected: Expected) -> list[tuple[str, str | None]]:
        """(check id, item) pairs this check stands for on a node."""
        if self.items is None:
            return [(self.id, None)]
        return [(f"{self.id}.{item}", item) for item in self.items(expected)]

    def plan(self, expected: Expected) -> list[PlannedCheck]:
        """This check's planned checks on the node `expected` describes."""
        return [PlannedCheck(check_id, self.id, item) for check_id, item in self.ids(expected)]

    def run(self, expected: Expected, facts: NodeFacts, item: str | None, check_id: str) -> CheckResult:
        """Judge one item on one node; a crash is reported as this check failing.

        A check of what sparkbase writes, on a node whose baseline leaves its section as found
        (or manages nothing), is a skip saying so; a failing check in a section left as found
        says that apply changes nothing there."""
        managed = expected.baseline.managed
        as_found = self.section is not None and self.section not in managed
        try:
            if self.written and (as_found or not managed):
                outcome = skip(_as_found_skip(self.section))
            else:
                outcome = self.judge(expected, facts, Subject(expected.node, item))
        except Exception as exc:  # a check bug must not hide every other result
            outcome = fail(None, f"check crashed: {type(exc).__name__}: {exc}", "report this bug")
        fix = outcome.fix
        if as_found and outcome.status == "fail" and self.section is not None:
            fix = _as_found_fix(self.section, fix)
        return CheckResult(
            check_id, self.area, self.severity, expected.node,
            outcome.status, outcome.expected, outcome.observed, fix,
        )


def _as_found_skip(section: str | None) -> str:
    if section is None:
        return "as found: the baseline manages no section (managed: []), so sparkbase writes nothing here"
    return f"as found: {section} is not in the baseline's managed:, so sparkbase writes nothing there"


def _as_found_fix(section: str, fix: str | None) -> str:
    """The fix of a failing check in a section left as found: by hand, since apply changes
    nothing there (what apply would do when the section is managed, beside)."""
    text = (f"as found: {section} is not in the baseline's managed:, so apply changes nothing there; "
            f"fix it by hand, or add {section} to managed:")
    return f"{text} (managed, the fix would be: {fix})" if fix else text


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
    check_id: str,
    area: str,
    summary: str,
    *,
    section: Section | None,
    written: bool = False,
    severity: Severity = "error",
    items: ItemsFn | None = None,
) -> Callable[[JudgeFn], JudgeFn]:
    """Register a node check (decorator on its judge; `section` is the baseline section whose
    steps fix it, `written` that it judges the content of what sparkbase writes there)."""

    def register(judge: JudgeFn) -> JudgeFn:
        if check_id in NODE_CHECKS:
            raise ValueError(f"check {check_id} registered twice")
        NODE_CHECKS[check_id] = NodeCheck(check_id, area, severity, summary, judge, items, section, written)
        return judge

    return register


def fleet_check(check_id: str, area: str, summary: str, key: Callable[[NodeFacts], object]) -> None:
    """Register a fleet agreement check (an error when the nodes disagree)."""
    FLEET_CHECKS[check_id] = FleetCheck(check_id, area, "error", summary, key)
