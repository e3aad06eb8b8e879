"""What sparkbase shows people: tables and live progress, styled only where that is safe.

One `Table` has two renderings:

- **rich** when the stream is a terminal and colour is allowed (no `--no-color`, no
  `NO_COLOR`, `TERM` not `dumb`): a styled table that fits the terminal, status cells in
  colour;
- **plain** otherwise (a pipe, a file, CI, `--no-color`, `NO_COLOR`): columns aligned with
  two spaces, no ANSI sequence, no box drawing, so `grep`, `awk` and diffs read it. This part
  stays hand-written on purpose: it is the text scripts and tests read (byte-stable across
  rich releases), and the gate's paths print it without importing rich at all.

Safety: every cell and header goes through `sparkbase.text.shown` and reaches rich as a
`rich.text.Text`, never as markup, so a node named `[bold]x` prints as typed and an escape
sequence prints as `\\x1b`. Rich writes to the real stream (its own ANSI codes must pass),
not through the CLI's `TerminalStream` safety net: that is why no text may reach it unescaped.

`Progress` is the live feedback of a command over many nodes (apply's steps, the audit's
nodes done): a transient rich display on a terminal's stderr, plain lines on stderr
otherwise; each step is also logged (logger `sparkbase.progress`, INFO) for `--log-file`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Literal

from sparkbase.text import shown

if TYPE_CHECKING:
    from rich.console import Console

log = logging.getLogger("sparkbase.progress")

#: a log record with this attribute set was already shown on stderr by `Progress`
SHOWN_ON_STDERR = "sparkbase_shown_on_stderr"

Align = Literal["left", "right"]


@dataclass
class _Output:
    """Where people's output goes and whether it may be styled (set once by the CLI)."""

    no_color: bool = False
    #: the real streams under the CLI's TerminalStream wrappers (rich writes here)
    stdout: IO[str] | None = None
    stderr: IO[str] | None = None


_output = _Output()


def configure(no_color: bool, stdout: IO[str] | None = None, stderr: IO[str] | None = None) -> None:
    """Set by the CLI before a command runs: `--no-color`, and the real streams."""
    _output.no_color = no_color
    _output.stdout = stdout
    _output.stderr = stderr


def color_allowed() -> bool:
    """Styling is allowed: no `--no-color`, `NO_COLOR` unset or empty, `TERM` not `dumb`."""
    return not _output.no_color and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def _real(stream: IO[str]) -> IO[str]:
    """The stream under a `TerminalStream` (or the stream itself)."""
    inner = getattr(stream, "stream", None)
    return inner if inner is not None else stream


def styled_stream(which: Literal["stdout", "stderr"]) -> IO[str] | None:
    """The real stream to draw on with rich, or None when output must be plain (not a
    terminal, or colour not allowed)."""
    if not color_allowed():
        return None
    configured = _output.stdout if which == "stdout" else _output.stderr
    stream = configured if configured is not None else _real(getattr(sys, which))
    try:
        return stream if stream.isatty() else None
    except (AttributeError, ValueError, OSError):
        return None


def rich_console(stream: IO[str]) -> Console:
    """A rich console on `stream` that interprets nothing it is given: no markup, no emoji
    codes, no highlighting of numbers or strings."""
    from rich.console import Console

    return Console(file=stream, markup=False, emoji=False, highlight=False)


# --- tables ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One table column: its header, how plain text bounds and aligns it, how rich styles it."""

    header: str
    #: plain rendering clips longer cells to this many characters, ending in `…`
    max_width: int | None = None
    align: Align = "left"
    #: rich rendering: the style of a cell by its exact text (e.g. `FAIL` -> `bold red`)
    styles: Mapping[str, str] = field(default_factory=dict)
    #: rich rendering: a narrow terminal folds this column's long cells (False: never, for
    #: the keys a reader scans, such as node names and check ids)
    wrap: bool = True


@dataclass(frozen=True)
class Table:
    """A table for people: columns and rows of text (user text; shown escaped when drawn)."""

    columns: tuple[Column, ...]
    rows: Sequence[Sequence[str]]
    #: plain rendering prints the header line even when there are no rows
    header_when_empty: bool = True
    #: plain rendering: what separates two columns
    separator: str = "  "


def plain_table(table: Table) -> str:
    """The table as aligned plain text (one line per row, trailing spaces stripped, a final
    newline), or "" when it has no rows and no header to show."""
    if not table.rows and not table.header_when_empty:
        return ""
    header = [column.header for column in table.columns]
    rows = [[shown(cell) for cell in row] for row in (header, *table.rows)]
    widths = []
    for index, column in enumerate(table.columns):
        widest = max(len(row[index]) for row in rows)
        widths.append(widest if column.max_width is None else min(widest, column.max_width))
    lines = []
    for row in rows:
        cells = []
        for index, column in enumerate(table.columns):
            cell = _clip(row[index], widths[index])
            cells.append(cell.rjust(widths[index]) if column.align == "right" else cell.ljust(widths[index]))
        lines.append(table.separator.join(cells).rstrip())
    return "\n".join(lines) + "\n"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def rich_table(table: Table) -> Any:
    """The table as a `rich.table.Table` of `Text` cells (nothing parsed as markup)."""
    from rich import box
    from rich.table import Table as RichTable
    from rich.text import Text

    drawn = RichTable(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False, show_edge=False)
    for column in table.columns:
        drawn.add_column(Text(shown(column.header)), justify=column.align, overflow="fold",
                         no_wrap=not column.wrap)
    for row in table.rows:
        drawn.add_row(*(Text(shown(cell), style=column.styles.get(cell, ""))
                        for column, cell in zip(table.columns, row, strict=True)))
    return drawn


def print_table(table: Table) -> None:
    """Print the table on stdout: rich on a terminal with colour allowed, else plain text."""
    stream = styled_stream("stdout")
    if stream is None:
        sys.stdout.write(plain_table(table))
        return
    if not table.rows and not table.header_when_empty:
        return
    rich_console(stream).print(rich_table(table))


# --- progress -------------------------------------------------------------------------------


class Progress:
    """Live feedback of one command over `total` nodes (None: steps without a count).

    `step(text)` reports a step worth a line (e.g. "spark2: rebooting"): above the live
    display on a terminal, as a plain stderr line otherwise; `done(node)` counts one node
    finished (shown only by the live display). Both are logged on `sparkbase.progress`
    (steps at INFO, nodes at DEBUG), so `--log-file` keeps them with timestamps.
    Thread-safe; never refreshes from a thread of its own (apply runs on gevent).
    """

    def __init__(self, label: str, total: int | None = None, live: bool = True) -> None:
        self.label = label
        self.total = total
        self._stream = styled_stream("stderr") if live else None
        self._display: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self._stream is not None:
            from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn
            from rich.progress import Progress as RichProgress

            # no elapsed-time column: the display is redrawn only when something happens
            columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
            if self.total is not None:
                columns += [BarColumn(), MofNCompleteColumn()]
            # no refresh thread (apply runs on gevent), and no stdout/stderr redirection: rich's
            # proxy would decode ANSI sequences in whatever else is printed meanwhile
            self._display = RichProgress(*columns, console=rich_console(self._stream), transient=True,
                                         auto_refresh=False, redirect_stdout=False, redirect_stderr=False)
            self._display.start()
            self._task = self._display.add_task(shown(self.label), total=self.total)
            self._display.refresh()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._display is not None:
            self._display.stop()
            self._display = None

    def step(self, text: str) -> None:
        """One step worth a line of its own."""
        line = shown(text)
        log.info("%s", line, extra={SHOWN_ON_STDERR: True})
        if self._display is not None:
            from rich.text import Text

            self._display.console.print(Text(line))
            self._display.refresh()
        else:
            print(line, file=sys.stderr, flush=True)

    def done(self, node: str) -> None:
        """One node finished."""
        log.debug("%s: %s done", shown(self.label), shown(node))
        if self._display is not None:
            self._display.advance(self._task)
            self._display.refresh()
