"""Located problems: every error sparkbase reports about input names a file, line and field."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path


class Severity(StrEnum):
    """How much a problem matters: errors stop the command, warnings are printed."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input, located at the key that causes it."""

    file: Path
    line: int
    column: int
    path: str
    message: str
    severity: Severity = Severity.ERROR

    def format(self, relative_to: Path | None = None) -> str:
        """Render as `FILE:LINE:COL: field.path: message` (warnings say so)."""
        shown = self.file
        if relative_to is not None:
            try:
                shown = self.file.resolve().relative_to(relative_to.resolve())
            except ValueError:
                shown = self.file
        where = f"{shown}:{self.line}:{self.column}"
        prefix = "warning: " if self.severity is Severity.WARNING else ""
        field_part = f"{self.path}: " if self.path else ""
        return f"{where}: {prefix}{field_part}{self.message}"


@dataclass
class ConfigError(Exception):
    """The site could not be loaded: one or more located problems (all of them at once)."""

    problems: list[Problem] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(problem.format() for problem in self.problems)
