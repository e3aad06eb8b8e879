"""Turn a node's `Step`s into pyinfra operation calls for the host in context.

Shared by the native deploy file (`deploys/baseline.py`, run by plain `pyinfra`) and by
sparkbase's in-process runner, so both converge a node the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api.operation import OperationMeta

from sparkbase.deploy.kinds import Step, Writes
from sparkbase.deploy.operations.base import noop_reasons


@dataclass
class AddedOp:
    """A step and the pyinfra operation that ensures it on one host."""

    step: Step
    meta: OperationMeta
    #: why the operation changes nothing ("" when it changes, or gave no reason)
    reason: str = ""


def add_steps(steps: list[Step]) -> list[AddedOp]:
    """Add one pyinfra operation per step for the current host, in order, each with the
    reason it changes nothing (if it says one)."""
    added: list[AddedOp] = []
    by_path: dict[str, OperationMeta] = {}
    for step in steps:
        with noop_reasons() as reasons:
            meta = step.args.add(step.name, by_path.get(step.after_change_of or ""))
        if isinstance(step.args, Writes):
            by_path[step.args.path] = meta
        added.append(AddedOp(step, meta, reasons[-1] if reasons else ""))
    return added
