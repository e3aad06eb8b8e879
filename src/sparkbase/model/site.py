"""Load a whole site (rules, baselines, inventory, lanes) into one validated `Site`.

This is where data enters sparkbase: every file is read once, validated once, and every
problem in every file is reported at once as `FILE:LINE:COL: field.path: message`.
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from sparkbase.errors import ConfigError, Problem, Severity
from sparkbase.model import cache as site_cache
from sparkbase.model.baseline import Baseline
from sparkbase.model.findings import DocRef, Finding
from sparkbase.model.inventory import Inventory
from sparkbase.model.lanes import Lane
from sparkbase.model.provenance import PlaceholderSource, covering_key, dotted_key, leaf_paths, merge_sources
from sparkbase.model.rules import (
    baseline_findings,
    contract_breaches,
    contract_notice,
    inventory_findings,
    lane_findings,
)
from sparkbase.model.site_files import DEFAULT_INVENTORY, SITE_DIRECTORIES, SITE_RULES_FILE
from sparkbase.model.site_files import inventory_file as site_inventory_file
from sparkbase.model.site_rules import SessionLoadTrigger, SiteRules
from sparkbase.model.yamlio import Location, PathKey, YamlDocument, dotted, load_yaml

LOCK_FILE = "sparkbase.lock"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Site:
    """A validated site: everything sparkbase knows about the fleet it manages."""

    root: Path
    rules: SiteRules
    baselines: dict[str, Baseline]
    abstract_baselines: frozenset[str]
    inventory: Inventory
    inventory_file: Path
    lanes: dict[str, Lane]
    warnings: list[Problem] = field(default_factory=list)
    #: where each key of the inventory file is, for errors found after loading
    inventory_locations: dict[PathKey, Location] = field(default_factory=dict)

    def baseline_of(self, node: str) -> Baseline:
        """The baseline assigned to `node`."""
        return self.baselines[self.inventory.nodes[node].baseline]

    def locate_inventory(self, path: PathKey) -> Location:
        """File, line and column of a key of the inventory (or its nearest parent)."""
        probe = tuple(path)
        while probe and probe not in self.inventory_locations:
            probe = probe[:-1]
        return self.inventory_locations.get(probe, Location(self.inventory_file, 1, 1))

    def path(self, relative: str) -> Path:
        """A path named in a site file, resolved against the site root."""
        candidate = Path(relative).expanduser()
        return candidate if candidate.is_absolute() else self.root / candidate


class _Loader:
    """Collects documents and problems while a site loads."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.problems: list[Problem] = []
        self.docs: dict[DocRef, YamlDocument] = {}

    def read(self, ref: DocRef, file: Path) -> YamlDocument | None:
        try:
            doc = load_yaml(file)
        except ConfigError as exc:
            self.problems.extend(exc.problems)
            return None
        if not isinstance(doc.data, dict):
            kind = "empty" if doc.data is None else type(doc.data).__name__
            self.problems.append(Problem(file, 1, 1, "", f"expected a mapping, the file is {kind}"))
            return None
        self.docs[ref] = doc
        return doc

    def validate(self, ref: DocRef, model: type[M], data: Any) -> M | None:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            doc = self.docs[ref]
            for error in exc.errors():
                self.problems.append(_problem_from_error(doc, model, error))
            return None

    def add(self, finding: Finding) -> None:
        doc = self.docs[finding.doc]
        location = doc.locate(finding.path)
        self.problems.append(
            Problem(
                location.file,
                location.line,
                location.column,
                dotted(finding.path),
                finding.message,
                finding.severity,
            )
        )


def trigger_placeholders(rules: SiteRules | None) -> Iterator[Finding]:
    """A warning for each re-open trigger threshold whose source is a placeholder (the site's to
    decide), as baselines' placeholders are."""
    for index, trigger in enumerate(rules.triggers if rules is not None else []):
        if not isinstance(trigger, SessionLoadTrigger):
            continue
        for key, source in trigger.sources.items():
            if isinstance(source, PlaceholderSource):
                yield Finding(("site", ""), ("triggers", index, "sources", key),
                              f"placeholder: {source.note}", Severity.WARNING)


def load_site(root: Path, inventory: Path | None = None, *, cache: bool = False) -> Site:
    """Load and validate the site at `root`; raise ConfigError listing every problem.

    With `cache`, a site validated before from the very same files is taken from
    `<site>/.sparkbase/cache/` instead of parsed again (see `sparkbase.model.cache`).
    """
    root = root.resolve()
    if not cache:
        return _load_site(root, inventory)
    key = site_cache.site_key(root, site_inventory_file(root, inventory), SITE_DIRECTORIES)
    cached = site_cache.load_cached(root, key, Site)
    if cached is not None:
        return cached
    site = _load_site(root, inventory)
    site_cache.store(root, key, site)
    return site


def _load_site(root: Path, inventory: Path | None) -> Site:
    """Load and validate the site at `root` (resolved) from its YAML files."""
    loader = _Loader(root)
    rules_doc = loader.read(("site", ""), root / "baselines" / SITE_RULES_FILE)
    rules = loader.validate(("site", ""), SiteRules, rules_doc.data) if rules_doc else None

    raw_baselines: dict[str, YamlDocument] = {}
    baseline_files = _site_files(root / "baselines", loader, also=(SITE_RULES_FILE, LOCK_FILE))
    for file in baseline_files:
        name = file.stem
        ref: DocRef = ("baseline", name)
        doc = loader.read(ref, file)
        if doc is not None:
            if not _valid_name(name):
                loader.problems.append(Problem(file, 1, 1, "", f"'{name}' is not a valid name"))
                continue
            raw_baselines[name] = doc
    merged = _resolve_extends(raw_baselines, loader)
    loader.problems.extend(inherited_source_problems(raw_baselines, merged))
    baselines: dict[str, Baseline] = {}
    abstract: set[str] = set()
    for name, doc in merged.items():
        flag = doc.data.get("abstract", False)
        if not isinstance(flag, bool):
            where = doc.locate(("abstract",))
            message = f"must be true or false (got {_shown(flag)})"
            loader.problems.append(Problem(where.file, where.line, where.column, "abstract", message))
            continue
        if flag:
            abstract.add(name)
            continue
        loader.docs[("baseline", name)] = doc
        baseline = loader.validate(("baseline", name), Baseline, doc.data)
        if baseline is not None:
            baselines[name] = baseline

    # baselines whose file is there but did not load: their own errors say why
    broken = frozenset(file.stem for file in baseline_files) - set(baselines) - abstract
    inventory_file = Path(os.path.abspath(root / (inventory or DEFAULT_INVENTORY)))  # a link stays itself
    inv_doc = loader.read(("inventory", ""), inventory_file)
    inv = loader.validate(("inventory", ""), Inventory, inv_doc.data) if inv_doc else None

    lanes: dict[str, Lane] = {}
    for file in _site_files(root / "lanes", loader):
        lane_ref: DocRef = ("lane", file.stem)
        lane_doc = loader.read(lane_ref, file)
        if lane_doc is None:
            continue
        if not _valid_name(file.stem):
            loader.problems.append(Problem(file, 1, 1, "", f"'{file.stem}' is not a valid name"))
            continue
        lane = loader.validate(lane_ref, Lane, lane_doc.data)
        if lane is not None:
            lanes[file.stem] = lane

    for name, baseline in baselines.items():
        for finding in baseline_findings(name, baseline):
            loader.add(finding)
    for finding in trigger_placeholders(rules):
        loader.add(finding)
    if rules is not None and inv is not None:
        for finding in inventory_findings(inv, baselines, abstract, rules.contract, broken):
            loader.add(finding)
        assigned = {node.baseline for node in inv.nodes.values()}
        for name, baseline in baselines.items():
            breaches = contract_breaches(rules.contract, baseline)
            if breaches and name not in assigned:
                loader.add(
                    Finding(
                        ("baseline", name),
                        breaches[0].path,
                        contract_notice(name, baseline, breaches),
                        Severity.WARNING,
                    )
                )
    if inv is not None:
        for name, lane in lanes.items():
            for finding in lane_findings(name, lane, baselines, inv, broken):
                loader.add(finding)

    # a mistake in a base file is seen once per baseline extending it: report it once
    loader.problems = list(dict.fromkeys(loader.problems))
    errors = [p for p in loader.problems if p.severity is Severity.ERROR]
    if errors or rules is None or inv is None:
        raise ConfigError(loader.problems)
    return Site(
        root=root,
        rules=rules,
        baselines=baselines,
        abstract_baselines=frozenset(abstract),
        inventory=inv,
        inventory_file=inventory_file,
        lanes=lanes,
        warnings=loader.problems,
        inventory_locations=inv_doc.locations if inv_doc else {},
    )


def _site_files(directory: Path, loader: _Loader, also: tuple[str, ...] = ()) -> list[Path]:
    """The `NAME.yaml` files of `directory`, sorted; every other entry is refused, located.

    Nothing in baselines/ or lanes/ is silently skipped: a `glm.yml` (or a `README`) next
    to the lanes would look read and not be. The only entries passed over are hidden ones
    (a leading '.': editors' swap files, `.gitkeep`) and the names in `also` (read on
    their own: `site.yaml`, the lock).
    """
    try:
        entries = sorted(directory.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        loader.problems.append(Problem(directory, 1, 1, "", f"cannot list: {exc.strerror or exc}"))
        return []
    files: list[Path] = []
    for entry in entries:
        if entry.name.startswith(".") or entry.name in also:
            continue
        if entry.suffix == ".yaml":
            files.append(entry)
            continue
        hint = (
            f"rename it to {entry.stem}.yaml"
            if entry.suffix.lower() in {".yml", ".yaml"}
            else "move it out of this folder"
        )
        loader.problems.append(
            Problem(
                entry,
                1,
                1,
                "",
                f"not read: {directory.name}/ holds NAME.yaml files only ({hint})",
            )
        )
    return files


def _shown(value: object, limit: int = 60) -> str:
    """A value's repr for a message: one line, at most `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _valid_name(name: str) -> bool:
    import re

    return re.fullmatch(NAME_PATTERN, name) is not None


def _resolve_extends(raw: dict[str, YamlDocument], loader: _Loader) -> dict[str, YamlDocument]:
    """Merge each baseline over the one it extends (mappings deep, lists replaced)."""
    resolved: dict[str, YamlDocument] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> YamlDocument | None:
        if name in resolved:
            return resolved[name]
        doc = raw[name]
        parent_name = doc.data.get("extends")
        if parent_name is None:
            resolved[name] = doc
            return doc
        where = doc.locate(("extends",))
        if not isinstance(parent_name, str) or parent_name not in raw:
            loader.problems.append(
                Problem(
                    where.file,
                    where.line,
                    where.column,
                    "extends",
                    f"no baseline '{parent_name}' to extend (have: {', '.join(sorted(raw))})",
                )
            )
            return None
        if parent_name in chain:
            cycle = " -> ".join([*chain, name, parent_name])
            loader.problems.append(
                Problem(where.file, where.line, where.column, "extends", f"extends cycle: {cycle}")
            )
            return None
        parent = resolve(parent_name, (*chain, name))
        if parent is None:
            return None
        data = _merge(parent.data, doc.data)
        if "sources" in doc.data:  # an entry replaces the inherited ones at and under its key
            data["sources"] = merge_sources(parent.data.get("sources"), doc.data["sources"])
        data.pop("extends", None)
        if "abstract" not in doc.data:
            data.pop("abstract", None)
        locations = {**parent.locations, **doc.locations}
        merged = YamlDocument(file=doc.file, data=data, locations=locations)
        resolved[name] = merged
        return merged

    for name in raw:
        resolve(name, ())
    return {name: doc for name, doc in resolved.items()}


def inherited_source_problems(
    raw: dict[str, YamlDocument], merged: dict[str, YamlDocument]
) -> list[Problem]:
    """A value a file sets itself whose source entry comes from the file it extends: the
    inherited entry speaks for the parent's value, not this one (a warning per value)."""
    problems: list[Problem] = []
    for name, doc in raw.items():
        whole = merged.get(name)
        sources = whole.data.get("sources") if whole is not None else None
        if whole is None or "extends" not in doc.data or not isinstance(sources, dict):
            continue
        keys = [key for key in sources if isinstance(key, str)]
        for path in leaf_paths(doc.data):
            key = covering_key(keys, dotted_key(path))
            if key is None:
                continue
            origin = whole.locate(("sources", key))
            if origin.file != doc.file:
                where = doc.locate(path)
                problems.append(
                    Problem(
                        where.file,
                        where.line,
                        where.column,
                        dotted(path),
                        f"set in this file, but its source (sources '{key}') is inherited from "
                        f"{origin.file.name}:{origin.line}: add a sources entry for it here",
                        Severity.WARNING,
                    )
                )
    return problems


def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for key, value in over.items():
            out[key] = _merge(base[key], value) if key in base else value
        return out
    return over


def _problem_from_error(doc: YamlDocument, model: type[BaseModel], error: Any) -> Problem:
    """Turn one pydantic error into a located, readable problem."""
    path = _data_path(doc.data, tuple(error["loc"]))
    kind = error["type"]
    if kind in {"union_tag_invalid", "union_tag_not_found"}:
        # point at the discriminator key (`kind:`), not at the list item holding it
        tag = str(error.get("ctx", {}).get("discriminator", "")).strip("'")
        holder = _value_at(doc.data, path)
        if isinstance(holder, dict) and tag in holder:
            path = (*path, tag)
    location: Location = doc.locate(path)
    if kind == "extra_forbidden":
        key = str(path[-1]) if path else "?"
        known = _field_names(model, path[:-1])
        message = f"unknown key '{key}'"
        import difflib  # only on this error path: the launch gate never needs it

        close = difflib.get_close_matches(key, known, n=1)
        if close:
            message += f"; did you mean '{close[0]}'?"
        elif known:
            message += f" (allowed: {', '.join(sorted(known))})"
    elif kind == "missing":
        message = "required field is missing"
    else:
        message = str(error["msg"])
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        is_key = "[key]" in error["loc"]  # the message names the key already
        if "input" in error and not is_key and not isinstance(error["input"], dict | list):
            message += f" (got {_shown(error['input'])})"
    return Problem(location.file, location.line, location.column, dotted(path), message)


def _value_at(data: Any, path: PathKey) -> Any:
    """The value found at `path` inside `data`, or None."""
    for part in path:
        in_map = isinstance(data, dict) and part in data
        in_list = isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
        if not (in_map or in_list):
            return None
        data = data[part]
    return data


def _data_path(data: Any, loc: tuple[Any, ...]) -> PathKey:
    """Map pydantic's error location onto the data's key path (dropping union tags)."""
    path: list[str | int] = []
    current = data
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(current, dict):
            if part in current:
                path.append(part)
                current = current[part]
            elif current.get("kind") == part:
                continue
            else:
                path.append(part)
                current = None
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            path.append(part)
            current = current[part]
        elif isinstance(part, str | int):
            path.append(part)
            current = None
    return tuple(path)


def _field_names(model: type[BaseModel], path: PathKey) -> list[str]:
    """Field names of the model found at `path` inside `model` (for "did you mean")."""
    current: Any = model
    for part in path:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            if not isinstance(part, str) or part not in current.model_fields:
                return []
            current = current.model_fields[part].annotation
        else:
            args = typing.get_args(current)
            if not args:
                return []
            current = args[-1]
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated and Optional wrappers."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            options = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(options) != 1:
                return annotation
            annotation = options[0]
        else:
            return annotation


def validated(doc: YamlDocument, model: type[M]) -> M:
    """`doc`'s data validated as `model` (a file outside the site, such as a prompt set), or
    `ConfigError` with every problem located in `doc`'s file, as the site's own are."""
    if not isinstance(doc.data, dict):
        kind = "empty" if doc.data is None else type(doc.data).__name__
        raise ConfigError([Problem(doc.file, 1, 1, "", f"expected a mapping, the file is {kind}")])
    try:
        return model.model_validate(doc.data)
    except ValidationError as exc:
        raise ConfigError([_problem_from_error(doc, model, error) for error in exc.errors()]) from None
