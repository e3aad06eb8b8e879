"""How far a built baseline's `sources:` covers it: keys naming no field, placeholders,
values no entry covers (what `validate` warns about and `lock --check` refuses).

The source kinds and how a key covers a field are `provenance.py`'s; this module reads a
whole `Baseline` with them, so it stands above both (the baseline model imports the source
kinds, never this).
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from sparkbase.model.baseline import Baseline
from sparkbase.model.provenance import META_KEYS, PlaceholderSource, covering_key, dotted_key, leaf_paths

if TYPE_CHECKING:
    from sparkbase.model.yamlio import PathKey


def written_values(baseline: Baseline) -> list[PathKey]:
    """The fields of `baseline` its files set (defaults left out), as leaf paths."""
    return list(leaf_paths(baseline.model_dump(mode="json", exclude_unset=True)))


def uncovered(baseline: Baseline) -> list[PathKey]:
    """Written values no sources entry covers."""
    keys = list(baseline.sources)
    return [path for path in written_values(baseline) if covering_key(keys, dotted_key(path)) is None]


def placeholders(baseline: Baseline) -> list[tuple[str, PlaceholderSource]]:
    """The placeholder entries of `baseline` (own and inherited), by key."""
    return [
        (key, source)
        for key, source in sorted(baseline.sources.items())
        if isinstance(source, PlaceholderSource)
    ]


@dataclass(frozen=True)
class Unconfirmed:
    """A value (or block) of a baseline that no source confirms: what `lock --check` refuses."""

    baseline: str
    key: str
    note: str  # the placeholder's note, or why there is no source

    def message(self) -> str:
        """`ds41f-7x-64k: nccl.library: placeholder: site to confirm ...`."""
        return f"{self.baseline}: {self.key}: {self.note}"


def unconfirmed(name: str, baseline: Baseline) -> list[Unconfirmed]:
    """Placeholders and unsourced values of one baseline, by key."""
    found = [Unconfirmed(name, key, f"placeholder: {source.note}") for key, source in placeholders(baseline)]
    blocks = sorted({str(path[0]) for path in uncovered(baseline)})
    found.extend(Unconfirmed(name, block, "no source recorded for values in this block") for block in blocks)
    return found


_INDEX = re.compile(r"[0-9]+")


def key_problem(key: str, baseline: Baseline) -> str | None:
    """Why `key` names no field of `baseline` (None when it does).

    A key walks the model's fields; at a mapping field (sysctls, NCCL extras) the rest of
    the key must be a key the baseline sets; at a list, the next part may be an index of
    an item the baseline has. `memory.memory_saver` names the field even when it is null.
    """
    parts = key.split(".")
    model: type[BaseModel] | None = Baseline
    value: Any = baseline
    walked: list[str] = []
    while parts:
        part = parts.pop(0)
        if model is None:
            return f"'{'.'.join(walked)}' has no fields: '{part}' is not one"
        if part not in model.model_fields or (not walked and part in META_KEYS):
            known = ", ".join(name for name in model.model_fields if walked or name not in META_KEYS)
            where = f"'{'.'.join(walked)}'" if walked else "a baseline"
            return f"'{part}' is not a field of {where} (fields: {known})"
        walked.append(part)
        value = getattr(value, part, None) if value is not None else None
        annotation = model.model_fields[part].annotation
        model = _model_in(annotation)
        if isinstance(value, dict):
            if not parts:
                return None
            rest = ".".join(parts)
            if rest not in value:
                have = ", ".join(sorted(value)) or "none"
                return f"'{'.'.join(walked)}' has no key '{rest}' here (keys: {have})"
            return None
        if isinstance(value, list) and parts and _INDEX.fullmatch(parts[0]):
            index = int(parts.pop(0))
            if index >= len(value):
                return f"'{'.'.join(walked)}' has {len(value)} item(s): no index {index}"
            walked.append(str(index))
            value = value[index]
            model = type(value) if isinstance(value, BaseModel) else None
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (through Optional and list), if any."""
    stack = [annotation]
    while stack:
        current = stack.pop()
        if isinstance(current, type) and issubclass(current, BaseModel):
            return current
        origin = typing.get_origin(current)
        if origin is dict:
            continue
        if origin in (typing.Union, types.UnionType, list, typing.Annotated):
            args = typing.get_args(current)
            stack.extend(args[:1] if origin is typing.Annotated else args)
    return None
