"""Logging for the command line: the global `--log-level LEVEL` and `--log-file FILE`.

What a command prints as its result (tables, verdicts, JSON) goes to stdout and is never a
log record. Everything else sparkbase says on the way is a record of a `sparkbase.*` logger
(`logging.getLogger(__name__)` in each module):

- **stderr** shows records at `--log-level` and above, default `warning`; a progress step
  that the live display (or a plain progress line) already showed is not repeated there;
- **`--log-file FILE`** appends every record at `--log-level` and above, default `info`
  (progress steps included), one line each, with a UTC timestamp, the level and the logger.

The log file is opened safely: never through a symbolic link (`O_NOFOLLOW`), only a regular
file (a FIFO or device is refused, and opening one never blocks), created mode 0600, always
appended. Every message is shown escaped (`sparkbase.text.shown`): a record is one line.
Only the `sparkbase` loggers are configured; libraries' loggers (paramiko, pyinfra) are left
as they are.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from sparkbase.console import SHOWN_ON_STDERR
from sparkbase.text import shown, shown_lines

#: stderr shows warnings and errors unless --log-level says otherwise
DEFAULT_STDERR_LEVEL = "warning"
#: a log file keeps progress steps too unless --log-level says otherwise
DEFAULT_FILE_LEVEL = "info"
#: the logger every sparkbase module's logger sits under
ROOT_LOGGER = "sparkbase"


class LogFileError(Exception):
    """The log file cannot be opened (a link, not a regular file, no permission…)."""


class EscapedFormatter(logging.Formatter):
    """A formatter that shows the message escaped (`sparkbase.text.shown`): a record is one
    line whatever its arguments hold; a traceback keeps its own lines, each escaped."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The message line, newlines and other hidden characters escaped."""
        record.message = shown(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        """The traceback, hidden characters escaped (its newlines kept)."""
        return shown_lines(super().formatException(ei))


class StderrFormatter(EscapedFormatter):
    """`sparkbase: warning: message`, as sparkbase's other stderr lines read."""

    def __init__(self) -> None:
        super().__init__("sparkbase: %(level)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """The record with its level in lower case."""
        record.level = record.levelname.lower()
        return super().format(record)


def open_log_file(path: Path) -> IO[str]:
    """`path` opened for appending: created 0600, never through a symbolic link, only a
    regular file. Raises LogFileError with a message a person can act on."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
    try:
        # O_NONBLOCK: opening a FIFO with no reader fails at once instead of hanging
        fd = os.open(path, flags | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if path.is_symlink():
            raise LogFileError("is a symbolic link; name the file itself") from None
        raise LogFileError(f"cannot open: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LogFileError("not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace")
    except BaseException:
        os.close(fd)
        raise


def configure_logging(level: str | None, log_file: Path | None) -> Callable[[], None]:
    """Attach the stderr (and file) handlers to the `sparkbase` logger; returns the undo
    (handlers removed, the file closed). Raises LogFileError."""
    logger = logging.getLogger(ROOT_LOGGER)
    handlers: list[logging.Handler] = []
    to_stderr = logging.StreamHandler(sys.stderr)
    to_stderr.setLevel((level or DEFAULT_STDERR_LEVEL).upper())
    to_stderr.setFormatter(StderrFormatter())
    to_stderr.addFilter(lambda record: not getattr(record, SHOWN_ON_STDERR, False))  # progress showed it
    handlers.append(to_stderr)
    if log_file is not None:
        to_file = logging.StreamHandler(open_log_file(log_file))
        to_file.setLevel((level or DEFAULT_FILE_LEVEL).upper())
        # `2026-12-01T04:50:00Z INFO sparkbase.progress: spark1: rebooting`
        utc = EscapedFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%SZ")
        utc.converter = time.gmtime
        to_file.setFormatter(utc)
        handlers.append(to_file)
    saved = (logger.level, logger.propagate)
    logger.setLevel(min(handler.level for handler in handlers))
    logger.propagate = False
    for handler in handlers:
        logger.addHandler(handler)

    def undo() -> None:
        for handler in handlers:
            logger.removeHandler(handler)
            if handler is not to_stderr:
                handler.close()
                stream = getattr(handler, "stream", None)
                if stream is not None:
                    stream.close()
        logger.setLevel(saved[0])
        logger.propagate = saved[1]

    return undo
