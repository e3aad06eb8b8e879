"""The sections of a baseline sparkbase may manage on a node, and what "as found" means.

A baseline's top-level host sections are `kernel`, `driver`, `nccl`, `fabric`, `memory`,
`secure_boot`, `host` and `cpuset`. Its `managed:` list names the ones sparkbase writes
(default: all of them). A section not listed is *as found*: `plan` and `apply` never write,
install, remove or restart anything for it (its deploy steps are not built, nothing it owns
is retired), `render` does not render its files, and the audit and the launch gate still
judge its effective values on the node (running kernel, loaded modules, live sysctls,
addresses, the NCCL library's sha256...) but not the content of the files sparkbase would
have written there. `sparkbase adopt` writes `managed: []`: on day one sparkbase owns and
writes nothing.

Every deploy step (`deploy/kinds.py`, `Step.section`), rendered file
(`render.RenderedFile.section`) and audit check (`audit/registry.py`, `NodeCheck.section`)
names the one section it belongs to; this module is the list they all name. Plain Python
(no pydantic): the launch gate's hot path may import it.
"""

from __future__ import annotations

import difflib
from typing import Literal, get_args

Section = Literal["kernel", "driver", "nccl", "fabric", "memory", "secure_boot", "host", "cpuset"]
#: every section, in the order the baseline file lists them (and plans show them)
SECTIONS: tuple[Section, ...] = get_args(Section)


def section_name(value: object) -> object:
    """A `managed:` entry must name a section; an unknown name says which one was meant."""
    if not isinstance(value, str) or value in SECTIONS:
        return value
    close = difflib.get_close_matches(value, SECTIONS, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise ValueError(f"'{value[:60]}' is not a baseline section{hint} (sections: {', '.join(SECTIONS)})")


def in_order(sections: object) -> object:
    """The managed sections in the baseline's order; a section named twice is an error (the
    list is a set: its order means nothing)."""
    if not isinstance(sections, list):
        return sections
    twice = sorted({name for name in sections if sections.count(name) > 1})
    if twice:
        raise ValueError(f"{', '.join(map(str, twice))} listed twice")
    return [name for name in SECTIONS if name in sections]


def as_found_text(sections: list[Section] | tuple[Section, ...]) -> str:
    """`as found, not managed: kernel, nccl` (what plans, renders and reports print)."""
    return "as found, not managed: " + ", ".join(sections)
