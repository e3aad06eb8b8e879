"""docs/sources/ds41f-recipe.md, generated from the variant baselines' `sources:`.

    .venv/bin/python tools/sources_doc.py > docs/sources/ds41f-recipe.md

Every value the variant's baseline files set, with what sparkbase holds and where it comes
from (the recipe file and commit, a seed note, a placeholder's question), read from the
shipped site itself: a unit test fails when the checked-in file is not what this module
writes, so the page cannot drift from the baselines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbase.model.coverage import written_values
from sparkbase.model.provenance import RecipeSource, Source, covering_key, dotted_key
from sparkbase.model.site import Site, load_site

if TYPE_CHECKING:
    from sparkbase.model.baseline import Baseline
    from sparkbase.model.yamlio import PathKey

#: the baselines the page covers: the variant, then the profiles that extend it
BASELINES = ("ds41f-7x-64k", "ds41f-stock-pages-262k")
RECIPE_REPOSITORY = "christopherowen/spark-ds41f"
#: the research record with the quote behind each recipe entry (written by hand, dated)
RESEARCH = "ds41f-research.md"
COMMAND = "python tools/sources_doc.py > docs/sources/ds41f-recipe.md"


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _value_at(data: Any, path: PathKey) -> Any:
    for part in path:
        data = data[part]
    return data


def _shown(value: Any) -> str:
    """A value as the YAML would write it: `null`, `true`, `[a, b]`, text as is."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "[" + ", ".join(_shown(item) for item in value) + "]"
    return json.dumps(value)


def _where(source: Source | None) -> str:
    """`recipe [file@commit](link)`, `seed`, `placeholder`, … (`none` without a source)."""
    if source is None:
        return "**none**"
    if isinstance(source, RecipeSource):
        if source.commit is None:
            return f"recipe `{source.file}`"
        link = f"https://github.com/{RECIPE_REPOSITORY}/blob/{source.commit}/{source.file}"
        return f"recipe [`{source.file}`@`{source.commit[:8]}`]({link})"
    return f"**{source.kind}**" if source.kind == "placeholder" else source.kind


def rows(baseline: Baseline) -> list[tuple[str, str, str, str, Source | None]]:
    """(field, value, sources key, note, source) of every value the baseline's files set."""
    data = baseline.model_dump(mode="json", exclude_unset=True)
    keys = list(baseline.sources)
    out = []
    for path in written_values(baseline):
        field = dotted_key(path)
        key = covering_key(keys, field)
        source = baseline.sources[key] if key is not None else None
        note = source.note if source is not None and source.note else ""
        out.append((field, _shown(_value_at(data, path)), key or "", note, source))
    return out


def _table(entries: list[tuple[str, str, str, str, Source | None]]) -> list[str]:
    """One row per value; an entry's note on the first row it covers only."""
    lines = ["| Field | sparkbase holds | Source | Entry | Note |", "| --- | --- | --- | --- | --- |"]
    noted: set[str] = set()
    for field, value, key, note, source in entries:
        entry = "" if key in ("", field) else f"`{key}`"
        shown = "" if key in noted else _cell(note)
        noted.add(key)
        lines.append(f"| `{field}` | `{_cell(value)}` | {_where(source)} | {entry} | {shown} |")
    return lines


def render_sources_doc(site: Site) -> str:
    """The page: each covered baseline's values and sources (a profile that extends another:
    only what it sets or sources differently)."""
    lines = [
        "# The spark-ds41f recipe in sparkbase's baselines, value by value",
        "",
        "Generated from the `sources:` of the shipped baselines; a unit test fails when this file",
        "is stale. Do not edit it by hand: change a baseline and its `sources:` entry, then run",
        "",
        f"    {COMMAND}",
        "",
        f"Recipe entries name a file of [`{RECIPE_REPOSITORY}`](https://github.com/{RECIPE_REPOSITORY})",
        "at a commit (8 hex digits); the note quotes or says what in the file gives the value.",
        "`Entry` is the sources key that covers the field when it is not the field itself (a",
        "block entry speaks for every field under it; its note is on the first row it covers).",
        "The quotes behind the entries, area by area (Kernel, Memory policy and swap, Memory",
        "saver, NCCL settings, Fabric addressing, where versions disagree, what no source says),",
        f"are in the research record [{RESEARCH}]({RESEARCH}).",
    ]
    parent: list[tuple[str, str, str, str, Source | None]] | None = None
    parent_name = ""
    for name in BASELINES:
        baseline = site.baselines[name]
        entries = rows(baseline)
        lines += ["", f"## {name} {baseline.version}", "", _cell(baseline.description), ""]
        if parent is not None:
            inherited = set(parent)
            own = [entry for entry in entries if entry not in inherited]
            lines += [f"What it sets, or sources, otherwise than {parent_name}; every other value is "
                      f"{parent_name}'s.", ""]
            entries_shown = own
        else:
            entries_shown = entries
        lines += _table(entries_shown)
        placeholders = sorted({key for _f, _v, key, _n, source in entries
                               if source is not None and source.kind == "placeholder"})
        unsourced = [field for field, _v, _k, _n, source in entries if source is None]
        lines += ["", f"{len(entries)} values: {len(placeholders)} placeholder entr"
                  f"{'y' if len(placeholders) == 1 else 'ies'} still to confirm"
                  + (f" ({', '.join(f'`{key}`' for key in placeholders)})" if placeholders else "")
                  + (f"; no source for {', '.join(f'`{f}`' for f in unsourced)}" if unsourced else "")
                  + "."]
        if parent is None:
            parent, parent_name = entries, name
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the page for the site in the working directory (the repository), or `argv[0]`."""
    args = sys.argv[1:] if argv is None else argv
    sys.stdout.write(render_sources_doc(load_site(Path(args[0]) if args else Path.cwd())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
