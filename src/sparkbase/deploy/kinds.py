"""The machinery of deploy steps: `Step`, the registry of step kinds (`KINDS`), what a
kind's operation reads of the node (`NodeReads`) and the bases that say what a kind does.

A kind is a frozen dataclass of its operation's arguments, declared beside the builder of its
steps in its area's module (`deploy/areas/`); its class line (`class Thp(StepArgs, kind="thp")`)
makes it one and registers it; `deploy.steps` imports every area module. `Recorded`:
its operation records what it creates under the baseline's name (only recorded things are
ever retired). `Writes`: it writes a whole file, or its part of one, at `path` (a follow-up
step naming the path in `Step.after_change_of` is given that operation as its `trigger`).
`reads` adds what the operation decides on to the node's one read (`deploy.reads.fact_plan`).
`add` calls the operation with every argument by name, so mypy checks each one.

Each `add` imports its operation (`deploy/operations/AREA.py`) where it calls it: steps are
built with no pyinfra, before `deploy.session` lets gevent patch the standard library, which
must come before pyinfra (and the ssl and paramiko it imports) is loaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, dataclass_transform

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta

    from sparkbase.model.sections import Section

#: kind name -> its arguments' class (every concrete kind, in the order they are declared)
KINDS: dict[str, type[StepArgs]] = {}


@dataclass
class NodeReads:
    """What a node's steps read of it while they are planned, collected in step order (each
    kind adds its own, `StepArgs.reads`); `deploy.reads.fact_plan` makes it one fact script."""

    states: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    units: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    sysctls: list[str] = field(default_factory=list)
    newer: list[tuple[str, str]] = field(default_factory=list)
    reload: list[str] = field(default_factory=list)
    modinfo: list[tuple[str, str]] = field(default_factory=list)
    sources: list[tuple[str, str]] = field(default_factory=list)
    swaps: list[str] = field(default_factory=list)
    initramfs: list[tuple[str, str]] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)
    netplan: bool = False


@dataclass_transform(kw_only_default=True, frozen_default=True)
@dataclass(frozen=True, kw_only=True)
class StepArgs(ABC):
    """One step kind's arguments; its class is the kind (`kind` names it), made a frozen
    dataclass with keyword-only fields by its class line."""

    #: the kind's name, as plans, results and the deploy cases show it
    kind: ClassVar[str]

    def __init_subclass__(cls, kind: str = "", **rest: Any) -> None:
        super().__init_subclass__(**rest)
        if kind in KINDS:
            raise TypeError(f"step kind {kind} declared twice ({KINDS[kind].__name__}, {cls.__name__})")
        dataclass(frozen=True, kw_only=True)(cls)
        if kind:
            cls.kind = kind
            KINDS[kind] = cls

    @abstractmethod
    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        """Add the kind's pyinfra operation for the host in context, named `name`; `trigger`
        is the operation of the file step it follows (`Step.after_change_of`), if any."""

    def reads(self, into: NodeReads, secret: bool) -> None:
        """Add to `into` what the kind's operation reads of the node while it is planned,
        beyond the state every plan reads (boot, MOK, holds, swaps, the ownership record);
        `secret`: the step's content must never be read back. Most kinds read nothing more."""
        return None

    def as_dict(self) -> dict[str, Any]:
        """The arguments by name (what a plan summary shows)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


class Recorded(StepArgs):
    """A kind whose operation records what it creates on the node, under the baseline's
    name (`build_steps` sets it): only recorded things are ever retired."""

    baseline: str = ""


class Writes(StepArgs):
    """A kind that writes a whole file, or its part of one, at `path`."""

    path: str


@dataclass(frozen=True)
class Step:
    """One thing the deploy ensures on a node, in order: plain data, its kind's typed
    arguments, a name a person reads in a plan and the baseline section it belongs to."""

    #: the kind's arguments (their class is the kind)
    args: StepArgs
    name: str
    #: a change made by this step only takes effect after a reboot
    reboot: bool = False
    #: the step handles a secret: never diff, print or log its content
    secret: bool = False
    #: path of the file step whose change triggers this step
    after_change_of: str | None = None
    #: the baseline section the step belongs to (None: the stamp, sparkbase's own record)
    section: Section | None = field(kw_only=True)

    @property
    def kind(self) -> str:
        """The kind's name (`KINDS`), as plans and results show it."""
        return self.args.kind

    def summary(self) -> dict[str, Any]:
        """The step as JSON-able data with file contents replaced by their sha256."""
        args: dict[str, Any] = {}
        for key, value in sorted(self.args.as_dict().items()):
            if key == "content":
                args["sha256"] = hashlib.sha256(str(value).encode()).hexdigest()
            else:
                args[key] = value
        out: dict[str, Any] = {"kind": self.kind, "name": self.name, "section": self.section, "args": args}
        if self.reboot:
            out["reboot"] = True
        if self.secret:
            out["secret"] = True
        if self.after_change_of:
            out["after_change_of"] = self.after_change_of
        return out
