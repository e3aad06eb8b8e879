"""Whether a retire step may remove what it finds on a node.

sparkbase never deletes what it did not make. When apply creates something (a file, a
directory, a swap file, a package installed from nothing, a DKMS build, a unit it enabled)
it records it on the node (`model.ownership`). A retire step removes an item only when the
record holds it and what is there now is still what sparkbase made; anything else is kept
and reported:

- `kept: … was not created by sparkbase` — no record: someone else made it;
- `kept: … changed since sparkbase created it` — recorded, but the content differs.

Pure: the decisions; no host, no pyinfra. The deploy (`deploy/operations/`) turns decisions
into commands.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum

from sparkbase.model.ownership import Entry, Kind, OwnedItem, OwnershipRecord

#: no-op reasons that start so are shown in plan and apply (deploy/results.KEPT)
KEPT = "kept: "


class Verdict(StrEnum):
    """What a retire step may do with one target."""

    ABSENT = "absent"  # nothing there: nothing to do
    REMOVE = "remove"  # sparkbase created it and it is unchanged
    NOT_OURS = "not created by sparkbase"
    CHANGED = "changed since sparkbase created it"
    HOLDS_OTHERS = "holds what sparkbase did not write"  # a directory sparkbase created


@dataclass(frozen=True)
class RetireDecision:
    """The verdict on one target, with what tells it apart (for the kept note)."""

    verdict: Verdict
    target: str
    detail: str = ""
    #: record entries to forget once the target is removed
    forget: tuple[tuple[Kind, str], ...] = ()

    @property
    def removable(self) -> bool:
        """Whether the retire step removes the target."""
        return self.verdict is Verdict.REMOVE

    def kept_note(self) -> str:
        """The plan/apply note for a target left in place (empty when it is removed or absent)."""
        if self.verdict in (Verdict.REMOVE, Verdict.ABSENT):
            return ""
        detail = f" ({self.detail})" if self.detail else ""
        return f"{KEPT}{self.target} {self.verdict.value}{detail}: left in place"


def decide_identified(kind: Kind, target: str, present: bool, identity: str | None,
                      record: OwnershipRecord) -> RetireDecision:
    """A file (identity: sha256), swap file (identity: header UUID), package (identity:
    installed version), DKMS build or unit (no identity): removable only when recorded and,
    where there is an identity, the one recorded."""
    if not present:
        return RetireDecision(Verdict.ABSENT, target)
    owned = record.find(kind, target)
    if owned is None:
        return RetireDecision(Verdict.NOT_OURS, target)
    recorded = _identity(owned)
    if recorded is not None and identity != recorded:
        what = {Kind.FILE: "sha256", Kind.SWAP: "swap UUID", Kind.PACKAGE: "version"}.get(kind, "identity")
        return RetireDecision(Verdict.CHANGED, target,
                              f"{what} {_short(identity)}, sparkbase recorded {_short(recorded)}")
    return RetireDecision(Verdict.REMOVE, target, forget=((kind, target),))


def _identity(item: OwnedItem) -> str | None:
    return item.sha256 or item.uuid or item.version


def _short(value: str | None) -> str:
    if value is None:
        return "none"
    return value[:12] + "…" if len(value) > 24 else value  # digests and UUIDs, not versions


def decide_directory(path: str, entries: list[Entry] | None, record: OwnershipRecord) -> RetireDecision:
    """A directory sparkbase created is removable only when everything in it is a file sparkbase
    wrote there, unchanged; `entries` None means there is no directory."""
    if entries is None:
        return RetireDecision(Verdict.ABSENT, path)
    if record.find(Kind.DIRECTORY, path) is None:
        return RetireDecision(Verdict.NOT_OURS, path)
    foreign: list[str] = []
    changed: list[str] = []
    forget: list[tuple[Kind, str]] = []
    for entry in entries:
        full = f"{path}/{entry.name}"
        owned = record.find(Kind.FILE, full)
        if entry.type != "f" or owned is None:
            foreign.append(entry.name)
        elif owned.sha256 != entry.sha256:
            changed.append(entry.name)
        else:
            forget.append((Kind.FILE, full))
    if foreign:
        return RetireDecision(Verdict.HOLDS_OTHERS, path, _names(foreign))
    if changed:
        return RetireDecision(Verdict.CHANGED, path, _names(changed))
    return RetireDecision(Verdict.REMOVE, path, forget=(*forget, (Kind.DIRECTORY, path)))


def _names(names: list[str]) -> str:
    shown = ", ".join(sorted(names)[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def decide_packages(names: list[str], installed: Mapping[str, Collection[str]],
                    record: OwnershipRecord) -> list[RetireDecision]:
    """One decision per package of `names`: removable when sparkbase installed it (from
    nothing) and it is still at the version sparkbase installed (`installed`: name ->
    installed versions, as pyinfra's DebPackages fact gives them)."""
    decisions = []
    for name in names:
        versions = sorted(installed.get(name) or [])
        version = versions[0] if len(versions) == 1 else ",".join(versions) or None
        decisions.append(decide_identified(Kind.PACKAGE, name, bool(versions), version, record))
    return decisions
