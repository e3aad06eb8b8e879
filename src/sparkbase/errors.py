"""Located problems: every error sparkbase reports about input names a file, line and field."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from sparkbase.text import shown


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
        """Render as `FILE:LINE:COL: field.path: message` (warnings say so), on one line:
        the file name, field path and message are user text, shown escaped (`sparkbase.text`)."""
        shown_file = self.file
        if relative_to is not None:
            try:  # the name as the site has it: a site file that is a link is not followed
                shown_file = (self.file.parent.resolve() / self.file.name).relative_to(
                    relative_to.resolve()
                )
            except (ValueError, OSError, RuntimeError):  # elsewhere, or a link loop
                shown_file = self.file
        where = f"{shown(shown_file)}:{self.line}:{self.column}"
        prefix = "warning: " if self.severity is Severity.WARNING else ""
        field_part = f"{shown(self.path)}: " if self.path else ""
        return f"{where}: {prefix}{field_part}{shown(self.message)}"


@dataclass
class ConfigError(Exception):
    """The site could not be loaded: one or more located problems (all of them at once)."""

    problems: list[Problem] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(problem.format() for problem in self.problems)
