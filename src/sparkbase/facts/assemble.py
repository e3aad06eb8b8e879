"""Sections of one answer → `NodeFacts` (pure: each area's parsers applied, failures recorded)."""

from __future__ import annotations

from sparkbase.facts.areas import FACTS, file_reads
from sparkbase.facts.model import NodeFacts
from sparkbase.facts.parsers.files import expand_files
from sparkbase.facts.script import FactPlan, Reader, Sections


def assemble(node: str, plan: FactPlan, sections: Sections, elapsed: float = 0.0) -> NodeFacts:
    """Typed facts of `node` from the sections its fact script printed: each area's
    `NodeFacts` fields (`facts/areas.py`), and what could not be read."""
    r = Reader(expand_files(sections, file_reads(plan)))
    for area in FACTS:
        r.facts.update(area(r, plan))
    return NodeFacts(node=node, errors=r.errors, elapsed_seconds=elapsed, **r.facts)
