"""Where each baseline value comes from: the `sources:` block of a baseline file.

A baseline file may carry `sources:`, a mapping from a dotted field path (a block such as
`kernel`, a field such as `kernel.release`, a list item such as `shapes.1`, a key of a
mapping field such as `memory.sysctls.vm.min_free_kbytes`) to where that value comes from:

    seed         a seed note of the site's domain notes        note: optional
    recipe       a file of the variant's published recipe       file: required, commit: optional
    site         a decision the site has made and written down  note: optional
    captured     read from a node by `sparkbase capture`        node: and time: required
    placeholder  not confirmed by anything yet                  note: required (what to confirm)

Every kind may carry a `note`. The most specific key covering a field applies. `extends`
inherits the parent's entries; an entry a file declares replaces the inherited entries at
and under its key (the file speaks for that whole block). A value no entry covers has no
source: `validate` warns and `lock --check` refuses it, as it refuses placeholders.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, Field, StringConstraints

from sparkbase.model.types import Name, StrictModel

if TYPE_CHECKING:
    from sparkbase.model.yamlio import PathKey

#: top-level baseline keys that describe the file rather than the host: never need a source
#: (`managed` says which sections sparkbase writes, not a value any node has)
META_KEYS = frozenset({"version", "description", "extends", "abstract", "sources", "managed"})

#: a dotted field path as a sources key (`kernel`, `memory.sysctls.vm.min_free_kbytes`)
SourceKey = Annotated[
    str, StringConstraints(pattern=r"^[a-z_]+(\.[A-Za-z0-9_]+){0,12}$", max_length=200)
]
Note = Annotated[str, StringConstraints(min_length=1, max_length=500, pattern=r"^[^\x00-\x1f\x7f]*$")]
#: a path inside the recipe repository (christopherowen/spark-ds41f): relative, no `..`


def _inside_repository(value: str) -> str:
    """A recipe file is a relative path that stays inside the repository."""
    if value.startswith("/") or ".." in value.split("/"):
        raise ValueError("must be a path inside the recipe repository (relative, no '..')")
    return value


RecipeFile = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9._/-]{1,200}$"),
    AfterValidator(_inside_repository),
]
CommitId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{7,40}$")]


def _utc_time(value: str) -> str:
    """An ISO-8601 time in UTC (`2026-12-01T02:00:00Z` or `+00:00`), as written."""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("not an ISO-8601 time (write e.g. 2026-12-01T02:00:00Z)") from None
    if parsed.tzinfo is None or parsed.utcoffset() != UTC.utcoffset(None):
        raise ValueError("the time must be in UTC (end it with Z or +00:00)")
    return value


UtcTime = Annotated[
    str,
    StringConstraints(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{5,20}(Z|[+-][0-9]{2}:[0-9]{2})$"),
    AfterValidator(_utc_time),
]


class SeedSource(StrictModel):
    """A value from the site's seed notes."""

    kind: Literal["seed"] = Field(description="the seed notes (/work/shared/domain)")
    note: Note | None = Field(default=None, description="which seed note")


class RecipeSource(StrictModel):
    """A value from the variant's published recipe (christopherowen/spark-ds41f)."""

    kind: Literal["recipe"] = Field(description="the variant's published recipe")
    file: RecipeFile = Field(description="path of the file in christopherowen/spark-ds41f")
    commit: CommitId | None = Field(default=None, description="commit the file was read at")
    note: Note | None = Field(default=None, description="what in the file says it")


class SiteSource(StrictModel):
    """A value the site has decided and written down."""

    kind: Literal["site"] = Field(description="a confirmed site decision")
    note: Note | None = Field(default=None, description="who decided, where it is written")


class CapturedSource(StrictModel):
    """A value read from a live node (`sparkbase capture`)."""

    kind: Literal["captured"] = Field(description="read from a node")
    node: Name = Field(description="node the value was read from")
    time: UtcTime = Field(description="when, ISO-8601 UTC")
    note: Note | None = Field(default=None, description="anything else worth keeping")


class PlaceholderSource(StrictModel):
    """A value nothing confirms yet: the note says what the site must confirm."""

    kind: Literal["placeholder"] = Field(description="not confirmed by any source")
    note: Note = Field(description="what must be confirmed, and how")


Source = Annotated[
    SeedSource | RecipeSource | SiteSource | CapturedSource | PlaceholderSource,
    Field(discriminator="kind"),
]


def describe(source: Source) -> str:
    """One short line for tables: `recipe config/cluster-4k.json@6a70c12`, `placeholder`."""
    if isinstance(source, RecipeSource):
        return f"recipe {source.file}" + (f"@{source.commit[:8]}" if source.commit else "")
    if isinstance(source, CapturedSource):
        return f"captured {source.node} {source.time}"
    return source.kind


def source_json(source: Source | None) -> dict[str, Any] | None:
    """A source as JSON (`kind` plus its fields), None for no source."""
    return None if source is None else source.model_dump(mode="json", exclude_none=True)


def dotted_key(path: PathKey) -> str:
    """A field path as a sources key (`memory.sysctls.vm.min_free_kbytes`, `shapes.1`)."""
    return ".".join(str(part) for part in path)


def covers(key: str, field: str) -> bool:
    """Whether the sources key `key` speaks for the dotted field `field`."""
    return field == key or field.startswith(key + ".")


def covering_key(keys: Iterable[str], field: str) -> str | None:
    """The most specific of `keys` that covers `field`, or None."""
    best: str | None = None
    for key in keys:
        if covers(key, field) and (best is None or len(key) > len(best)):
            best = key
    return best


def source_of(sources: dict[str, Source], path: PathKey) -> Source | None:
    """The source that applies to the field at `path` (the most specific key), if any."""
    key = covering_key(sources, dotted_key(path))
    return None if key is None else sources[key]


def merge_sources(inherited: Any, own: Any) -> Any:
    """The `sources:` of a file that extends another: its own entries replace the inherited
    ones at and under each of its keys. Anything but two mappings: the file's own value."""
    if not isinstance(inherited, dict) or not isinstance(own, dict):
        return own
    kept = {
        key: value
        for key, value in inherited.items()
        if not any(isinstance(mine, str) and covers(mine, str(key)) for mine in own)
    }
    return {**kept, **own}


def leaf_paths(data: Any, path: PathKey = ()) -> Iterator[PathKey]:
    """Every value written in baseline data: mappings by key, lists of mappings by index;
    a scalar, a list of scalars, an empty mapping and null are one value each."""
    if isinstance(data, dict) and data:
        for key, value in data.items():
            if not path and key in META_KEYS:
                continue
            yield from leaf_paths(value, (*path, key))
    elif isinstance(data, list) and data and all(isinstance(item, dict) for item in data):
        for index, item in enumerate(data):
            yield from leaf_paths(item, (*path, index))
    elif path:
        yield path
