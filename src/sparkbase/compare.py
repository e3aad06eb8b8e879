"""Two baselines side by side: every field where they differ, and what each difference means.

The walk is over `model_dump()` (mappings by key, lists by index), so every field the model
has is compared and paths read like the YAML (`nccl.settings.ib_merge_nics`). Each
difference says which side breaks the site contract there (judged by `contract_breaches`,
the one place the contract is decided) and whether it is an adoption blocker: a field the
variant's tooling refuses a cluster on (kernel and page size, driver, memory-saver and
Secure Boot, NCCL merge setting, transport). Beside each value stands its provenance:
the `sources:` entry that covers the field in that baseline (`model/provenance.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkbase.console import Column, Table
from sparkbase.model.provenance import META_KEYS, Source, describe, source_json, source_of
from sparkbase.model.rules import Breach, contract_breaches
from sparkbase.model.yamlio import PathKey, dotted
from sparkbase.text import shown

if TYPE_CHECKING:
    from sparkbase.model.baseline import Baseline
    from sparkbase.model.site_rules import SiteContract

#: bump when the JSON shape of `ComparisonReport.as_json` changes
COMPARE_FORMAT = 2  # 2: each difference carries a_source and b_source

#: field prefix -> adoption-blocker area
BLOCKERS: tuple[tuple[PathKey, str], ...] = (
    (("kernel", "release"), "kernel"),
    (("kernel", "package_version"), "kernel"),
    (("kernel", "page_size"), "page size"),
    (("driver",), "driver"),
    (("memory", "memory_saver"), "memory-saver"),
    (("secure_boot",), "secure boot"),
    (("nccl", "settings", "ib_merge_nics"), "nccl merge"),
)


@dataclass(frozen=True)
class Difference:
    """One leaf field whose value differs between the two baselines."""

    path: PathKey
    a: Any
    b: Any
    breaks_contract: tuple[str, ...]  # the sides ("a", "b") that break the contract here
    blocker: str | None  # adoption-blocker area, or None
    a_source: Source | None = None  # where A's value comes from (None: no source recorded)
    b_source: Source | None = None

    def as_json(self) -> dict[str, Any]:
        """The difference as the `compare --json` contract shows it."""
        return {
            "path": dotted(self.path),
            "a": self.a,
            "b": self.b,
            "a_source": source_json(self.a_source),
            "b_source": source_json(self.b_source),
            "breaks_contract": list(self.breaks_contract),
            "blocker": self.blocker,
        }


@dataclass(frozen=True)
class Side:
    """One of the two baselines and how it stands against the site contract."""

    name: str
    version: str
    breaches: tuple[Breach, ...]

    def as_json(self) -> dict[str, Any]:
        """Name, version and contract breaches (field and message)."""
        return {
            "name": self.name,
            "version": self.version,
            "satisfies_contract": not self.breaches,
            "contract_breaches": [
                {"path": dotted(breach.path), "message": breach.message()} for breach in self.breaches
            ],
        }


@dataclass(frozen=True)
class ComparisonReport:
    """The result of comparing baseline A with baseline B."""

    a: Side
    b: Side
    differences: tuple[Difference, ...]

    def as_json(self) -> dict[str, Any]:
        """The pinned JSON shape of `sparkbase compare --json`."""
        return {
            "format": COMPARE_FORMAT,
            "a": self.a.as_json(),
            "b": self.b.as_json(),
            "differences": [difference.as_json() for difference in self.differences],
            "blockers": sorted({d.blocker for d in self.differences if d.blocker}),
        }


def compare_baselines(
    contract: SiteContract, a_name: str, a: Baseline, b_name: str, b: Baseline
) -> ComparisonReport:
    """Every field where `a` and `b` differ, judged against `contract`."""
    a_breaches = tuple(contract_breaches(contract, a))
    b_breaches = tuple(contract_breaches(contract, b))
    differences: list[Difference] = []
    for path, left, right in diff_values(a.model_dump(mode="json"), b.model_dump(mode="json")):
        if path == ("description",):
            continue
        sides = tuple(
            side
            for side, breaches in (("a", a_breaches), ("b", b_breaches))
            if any(_related(path, breach.path) for breach in breaches)
        )
        differences.append(
            Difference(
                path,
                left,
                right,
                sides,
                blocker_area(path),
                source_of(a.sources, path),
                source_of(b.sources, path),
            )
        )
    return ComparisonReport(
        Side(a_name, a.version, a_breaches), Side(b_name, b.version, b_breaches), tuple(differences)
    )


def diff_values(left: Any, right: Any, path: PathKey = ()) -> list[tuple[PathKey, Any, Any]]:
    """Leaf paths where `left` and `right` differ; a missing side is None."""
    if isinstance(left, dict) or isinstance(right, dict):
        if (left is not None and not isinstance(left, dict)) or (
            right is not None and not isinstance(right, dict)
        ):
            return [(path, left, right)]
        lmap: dict[str, Any] = left or {}
        rmap: dict[str, Any] = right or {}
        out: list[tuple[PathKey, Any, Any]] = []
        for key in [*lmap, *[k for k in rmap if k not in lmap]]:
            out.extend(diff_values(lmap.get(key), rmap.get(key), (*path, key)))
        return out
    if isinstance(left, list) and isinstance(right, list):
        if _all_scalars(left) and _all_scalars(right):
            return [] if left == right else [(path, left, right)]
        out = []
        for index in range(max(len(left), len(right))):
            lval = left[index] if index < len(left) else None
            rval = right[index] if index < len(right) else None
            out.extend(diff_values(lval, rval, (*path, index)))
        return out
    return [] if left == right else [(path, left, right)]


def blocker_area(path: PathKey) -> str | None:
    """The adoption-blocker area a field belongs to, if any."""
    if len(path) == 3 and path[0] == "shapes" and path[2] == "transport":
        return "transport"
    if len(path) == 2 and path[0] == "shapes":
        return "transport"
    for prefix, area in BLOCKERS:
        if path[: len(prefix)] == prefix:
            return area
    return None


def _related(path: PathKey, breach: PathKey) -> bool:
    """A difference is about a breach when one path contains the other."""
    shortest = min(len(path), len(breach))
    return path[:shortest] == breach[:shortest]


def _all_scalars(items: list[Any]) -> bool:
    return all(not isinstance(item, dict | list) for item in items)


def comparison_table(report: ComparisonReport) -> Table:
    """The differences as a table: field, each side's value and source, which side breaks
    the contract there, the adoption blocker. Names, values and sources are user text,
    shown escaped when drawn (`sparkbase.console`)."""
    def origin(path: PathKey, value: Any, source: Source | None) -> str:
        if value is None or path[0] in META_KEYS:  # nothing set, or the file's own version
            return ""
        return "(no source)" if source is None else describe(source)

    def show(value: Any) -> str:
        if value is None:
            return "—"
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, list):
            return "[" + ", ".join(show(item) for item in value) + "]"
        return str(value)

    a_name, b_name = report.a.name, report.b.name
    columns = (
        Column("FIELD", wrap=False),
        Column(a_name),
        Column("SOURCE", styles={"(no source)": "yellow"}),
        Column(b_name),
        Column("SOURCE", styles={"(no source)": "yellow"}),
        Column("CONTRACT", styles={f"broken by {name}": "bold red" for name in (a_name, b_name)}),
        Column("BLOCKER", styles={d.blocker: "bold" for d in report.differences if d.blocker}),
    )
    rows = [
        (
            dotted(d.path),
            show(d.a),
            origin(d.path, d.a, d.a_source),
            show(d.b),
            origin(d.path, d.b, d.b_source),
            (
                "broken by "
                + " and ".join(a_name if s == "a" else b_name for s in d.breaks_contract)
            )
            if d.breaks_contract
            else "",
            d.blocker or "",
        )
        for d in report.differences
    ]
    return Table(columns, rows)


def contract_lines(report: ComparisonReport) -> list[str]:
    """What follows the table: no differences (when so), each side against the site
    contract, the adoption blockers that differ; user text shown escaped."""
    lines: list[str] = []
    if not report.differences:
        lines.append(f"(no differences between {shown(report.a.name)} and {shown(report.b.name)})")
    lines.append("")
    for side in (report.a, report.b):
        if side.breaches:
            lines.append(
                f"{shown(side.name)} {shown(side.version)} breaks the site contract "
                f"({len(side.breaches)} breach(es)); it cannot be assigned while the contract stands:"
            )
            lines.extend(f"  - {shown(dotted(b.path))}: {shown(b.message())}" for b in side.breaches)
        else:
            lines.append(f"{shown(side.name)} {shown(side.version)} satisfies the site contract.")
    blockers = sorted({d.blocker for d in report.differences if d.blocker})
    if blockers:
        lines.append(f"adoption blockers that differ: {', '.join(blockers)}")
    return lines
