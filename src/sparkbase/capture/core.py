"""What every area's capture shares: the values read, what the node could not tell, and
the DKMS and module-parameter readings more than one area takes."""

from __future__ import annotations

from dataclasses import dataclass

from sparkbase.facts.model import NodeFacts
from sparkbase.model.yamlio import PathKey, dotted


@dataclass(frozen=True)
class Captured:
    """One value read from the node, and the baseline field it sets."""

    path: PathKey
    value: object

    @property
    def key(self) -> str:
        """The field's dotted path (its key in `sources:`)."""
        return dotted(self.path)


@dataclass(frozen=True)
class Capture:
    """What a node told: the values to write, and what it could not tell (kept as they were)."""

    values: tuple[Captured, ...]
    missing: tuple[str, ...]  # "field: why", for fields left at the file's value
    dropped: tuple[str, ...] = ()  # list items the node contradicts, removed


def yes(value: str | None) -> bool | None:
    """A module parameter's `Y`/`N` (or 1/0) as a bool; None when unreadable."""
    if value is None:
        return None
    text = value.strip().upper()
    if text in {"Y", "1"}:
        return True
    if text in {"N", "0"}:
        return False
    return None


class Collector:
    """The values one capture gathers, area by area, and what it left or dropped."""

    def __init__(self) -> None:
        self.values: list[Captured] = []
        self.missing: list[str] = []
        self.dropped: list[str] = []

    def put(self, path: PathKey, value: object, why_missing: str) -> None:
        """Set `path` to `value`; None is a field the node could not tell (`why_missing`)."""
        if value is None:
            self.missing.append(f"{dotted(path)}: {why_missing}")
        else:
            self.values.append(Captured(path, value))

    def put_null(self, path: PathKey) -> None:
        """Set `path` to null: the node shows the baseline should not manage it."""
        self.values.append(Captured(path, None))


def dkms_version(facts: NodeFacts, dkms_name: str) -> str | None:
    """The version DKMS has installed of `dkms_name` for the running kernel."""
    versions = {entry.version for entry in facts.dkms
                if entry.name == dkms_name and entry.kernel == facts.kernel_release and entry.installed}
    return versions.pop() if len(versions) == 1 else None


def dkms_build(block: PathKey, dkms_name: str, version: str | None, facts: NodeFacts,
                out: Collector) -> None:
    """A DKMS module's name and version, where dkms has it installed for the running kernel."""
    if version is None:
        out.missing.append(f"{dotted((*block, 'dkms_version'))}: dkms status has no {dkms_name} "
                           f"installed for {facts.kernel_release}")
        return
    out.put((*block, "dkms_name"), dkms_name, "")
    out.put((*block, "dkms_version"), version, "")
