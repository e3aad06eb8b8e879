"""A rule's verdict on one field of one document: what every rule module yields.

Below every rule module (`rules.py`, `rendered_rules.py`, `fabric.py`), so each builds on
it without importing another; `site.py` turns findings into located `Problem`s.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkbase.errors import Severity
from sparkbase.model.yamlio import PathKey

#: which document a finding is about: ("baseline", name), ("inventory", ""), ("lane", name),
#: ("site", "")
DocRef = tuple[str, str]


@dataclass(frozen=True)
class Finding:
    """A rule's verdict on one field of one document."""

    doc: DocRef
    path: PathKey
    message: str
    severity: Severity = Severity.ERROR
