"""Typed results of plan and apply, their exit status and their JSON contract.

The JSON printed by `--json` is a contract (pinned by `tests/unit/test_deploy_units.py`):
`{"format": 2, "command": "plan"|"apply", "exit_code": N, "notes": [...], "nodes": [NodeResult...]}`;
each node says which sections its baseline leaves as found (`unmanaged`), each operation
its section (additions to format 2: no key changed meaning).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from sparkbase.model.sections import Section, as_found_text
from sparkbase.transport.failure import FailureKind

RESULT_FORMAT = 2  # 2: nodes[].failure (the typed failure kind)
#: a no-op reason that starts so is a change waiting for the reboot (plan and apply show it)
DEFERRED = "deferred: "
#: a no-op reason that starts so reports state deliberately kept (plan and apply show it)
KEPT = "kept: "


class NodeStatus(StrEnum):
    """Where a node ended up."""

    UNCHANGED = "unchanged"
    CHANGED = "changed"
    WOULD_CHANGE = "would change"
    REBOOT_PENDING = "reboot pending"
    #: the MOK the modules are signed with waits for a person at the console (`policy.mok`)
    MOK_PENDING = "MOK enrolment pending"
    FAILED = "failed"
    UNREACHABLE = "unreachable"
    NOT_STARTED = "not started"
    LOCKED = "locked"


@dataclass
class OpResult:
    """One operation on one node."""

    name: str
    kind: str
    status: str  # "changed", "would change", "unchanged", "failed"
    reason: str = ""  # why nothing changed (pyinfra no-op reason)
    diff: list[str] = field(default_factory=list)
    #: the baseline section the step belongs to (None: the stamp, sparkbase's own record)
    section: Section | None = None

    @property
    def note(self) -> bool:
        """Unchanged, but worth showing: deferred until the reboot, or deliberately kept."""
        return self.status == "unchanged" and self.reason.startswith((DEFERRED, KEPT))


@dataclass
class NodeResult:
    """One node's outcome."""

    node: str
    baseline: str
    status: NodeStatus = NodeStatus.UNCHANGED
    operations: list[OpResult] = field(default_factory=list)
    reboot_reasons: list[str] = field(default_factory=list)
    rebooted: bool = False
    running_kernel: str = ""
    message: str = ""
    #: why the node failed or was not reached (`transport.failure`); None when it did not
    failure: FailureKind | None = None
    #: the baseline's sections left as found (`managed:`): nothing was planned or done there
    unmanaged: list[Section] = field(default_factory=list)
    #: the MOK enrolment that waits for a person at the console, with the console steps
    #: (`PendingEnrolment.to_json`); None when none waits
    mok_enrolment: dict[str, Any] | None = None

    @property
    def changes(self) -> list[OpResult]:
        """Operations that changed (or would)."""
        return [op for op in self.operations if op.status in ("changed", "would change")]

    def detail(self) -> str:
        """What happened, for people: changes, the reboot needed or done, why it stopped."""
        detail = f"{len(self.changes)} change(s)" if self.changes else "no changes"
        if self.reboot_reasons and self.status in (NodeStatus.REBOOT_PENDING, NodeStatus.WOULD_CHANGE):
            detail += "; reboot needed: " + "; ".join(self.reboot_reasons)
        if self.rebooted:
            detail += f"; rebooted, running {self.running_kernel}"
        if self.message:
            detail += f"; {self.message}"
        if self.mok_enrolment is not None:
            steps = " → ".join(self.mok_enrolment["console_steps"])
            key = self.mok_enrolment["fingerprint"]
            detail += (f"; MOK enrolment pending ({key}), the signed modules load only once a person at "
                       f"the console enrols it: {steps}")
        if self.unmanaged:
            detail += "; " + as_found_text(self.unmanaged)
        return detail

    def to_json(self) -> dict[str, Any]:
        """The node's JSON record."""
        data = asdict(self)
        data["status"] = str(self.status)
        data["failure"] = str(self.failure) if self.failure is not None else None
        data["reboot_required"] = bool(self.reboot_reasons)
        return data


@dataclass
class Report:
    """The outcome of one plan or apply over several nodes."""

    command: str
    nodes: list[NodeResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def exit_code(self) -> int:
        """0 nothing to do/converged, 1 failure/refusal/pending/would change, 3 unreachable."""
        statuses = {n.status for n in self.nodes}
        if statuses & {NodeStatus.FAILED, NodeStatus.LOCKED}:
            return 1
        if NodeStatus.UNREACHABLE in statuses:
            return 3
        if statuses & {NodeStatus.REBOOT_PENDING, NodeStatus.MOK_PENDING, NodeStatus.WOULD_CHANGE,
                       NodeStatus.NOT_STARTED}:
            return 1
        return 0

    def to_json(self) -> dict[str, Any]:
        """The whole report as the `--json` contract."""
        return {
            "format": RESULT_FORMAT,
            "command": self.command,
            "exit_code": self.exit_code(),
            "notes": self.notes,
            "nodes": [n.to_json() for n in self.nodes],
        }

