"""Entry point of the `sparkbase` command.

Each sub-command lives in its own module under `sparkbase.cli` and exposes
`add_arguments(parser)` and `run(args) -> int`. Only the invoked command's module is
imported (every one of them for the CLI reference), when argparse is being built; it
imports what its command needs at its top. What every command loads (this module,
`cli.common`, `cli.logs`) stays light: `sparkbase --help` loads no more.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from sparkbase import __version__, console
from sparkbase.cli.common import add_global_options
from sparkbase.cli.logs import LogFileError, configure_logging
from sparkbase.console import SHOWN_ON_STDERR
from sparkbase.errors import ConfigError
from sparkbase.text import TerminalStream, shown

#: sub-command name -> (module under sparkbase.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("init", "write a commented starter site (the shipped example) into DIR"),
    "validate": ("validate", "load and validate the site; print every problem"),
    "render": ("render", "write the files each node must carry"),
    "lock": ("lock", "record (or --check) each baseline's version and render hash"),
    "compare": ("compare", "two baselines side by side, where they differ"),
    "schema": ("schema", "JSON Schema of baseline files, for editors"),
    "plan": ("plan", "dry run: what apply would change on each node"),
    "apply": ("apply", "converge nodes to their baselines"),
    "audit": ("audit", "drift audit: every check on every node and across the fleet"),
    "preflight": ("preflight", "the lane launch gate: refuse unless every node matches"),
    "qualify": ("qualify", "the release gate: determinism and A/B/A speed of a lane, recorded"),
    "lane": ("lane", "the serving lane the proxy points at: status, switch through the gate"),
    "triggers": ("triggers", "evaluate the re-open triggers with evidence"),
    "capture": ("capture", "write a baseline read from a live node, each value marked captured"),
    "adopt": ("adopt", "write a complete site read from a running fleet; list what no node can tell"),
}
#: the emulated fleet's command: its module is the lab's own (`sparkbase-lab`, a distribution
#: of its own so that a site's install holds no emulator), listed here by name only
LAB_COMMAND = ("lab", "sparkbase_lab.cli", "the emulated fleet: four DGX Sparks on this machine")
#: what `sparkbase lab ...` says when the lab's distribution is not installed
LAB_NOT_INSTALLED = ("sparkbase lab: the emulated fleet is not installed: pip install sparkbase-lab "
                     "(in a checkout: ./scripts/bootstrap)")

EXIT_CODES = """\
exit status:
  0  success / clean / nothing would change
  1  drift, refusal, a change pending, or a trigger fired
  2  bad configuration or usage (file:line:col: field: message)
  3  a node was unreachable (the others were still handled)
  4  triggers: none fired, but one could not be judged (no metrics, or none it reads)
  70 internal error: a bug in sparkbase (one line; the traceback with --debug)
"""

OUTPUT_AND_LOGS = """\
output and logging:
  A command's result (tables, verdicts, JSON) goes to stdout; warnings, errors and
  progress go to stderr.
  On a terminal, tables are drawn in colour (rich) and audit, plan and apply show a live
  progress display on stderr. With --no-color, $NO_COLOR set, TERM=dumb, or the output
  going to a pipe or file, everything is plain text: aligned columns, no colour codes, no
  box drawing, progress steps as plain stderr lines. Text from sites and nodes always
  prints literally (escaped), never as markup or terminal controls.
  --log-level LEVEL  records shown on stderr at LEVEL and above (default: warning)
  --log-file FILE    records appended at --log-level (default: info; progress steps and each
                     command's exit included), one line each with a UTC timestamp; FILE is
                     created 0600, and a symbolic link or non-regular file is refused (exit 2)
  These global options go before the command or among its own options.
"""

#: exit status of an unexpected exception (sysexits' EX_SOFTWARE): never 1, which means drift
INTERNAL_ERROR = 70
#: how much of an internal error's message is printed (the rest is in the --debug traceback)
INTERNAL_MESSAGE_LIMIT = 300


#: the main parser's options that take a value (the word after them is not the command)
_VALUED_OPTIONS = ("--log-level", "--log-file")


def invoked_command(argv: Sequence[str]) -> str | None:
    """The command `argv` names (its first word that is neither an option nor an option's
    value), or None when it names none. Only a guess for `build_parser`: argparse still
    reads the whole line and reports every mistake in it."""
    words = iter(argv)
    for word in words:
        if word == "--":
            return next(words, None)
        if word in _VALUED_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Build the argument parser, one sub-parser per available command.

    With `argv` (the command line about to be parsed), only the command it names gets its
    options, and only that command's module is imported: the others are listed (their
    names and one-line help, all that the main help and argparse's errors show) but not
    built. Without `argv`, every command is built (the CLI reference, tests)."""
    parser = argparse.ArgumentParser(
        prog="sparkbase",
        description="Keep a DGX Spark fleet on one declared, typed host baseline.",
        epilog=EXIT_CODES + "\n" + OUTPUT_AND_LOGS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # argparse reads every option of the whole command line against the main parser
        # first: with abbreviations on, a command's own `--log FILE` (preflight, lane) would
        # be refused as an ambiguous prefix of --log-level/--log-file
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"sparkbase {__version__}")
    add_global_options(parser, with_defaults=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = None if argv is None else invoked_command(argv)
    modules = [(name, f"sparkbase.cli.{module}", help_text) for name, (module, help_text) in COMMANDS.items()]
    for name, module_name, help_text in [*modules, LAB_COMMAND]:
        if argv is not None and name != wanted:
            sub.add_parser(name, help=help_text)  # listed; never parsed on this run
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if name != LAB_COMMAND[0] or exc.name not in ("sparkbase_lab", module_name):
                raise  # a product module missing, or the lab installed but broken
            _add_lab_not_installed(sub, help_text)
            continue
        command = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip(),
                                 epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(command)
        add_global_options(command.add_argument_group("global options"), with_defaults=False)
        command.set_defaults(_run=module.run)
    return parser


def _add_lab_not_installed(sub: argparse._SubParsersAction[argparse.ArgumentParser], help_text: str) -> None:
    """`sparkbase lab ...` without the lab installed: whatever follows, one line saying how
    to install it, exit 2."""

    def not_installed(_: argparse.Namespace) -> int:
        print(LAB_NOT_INSTALLED, file=sys.stderr)
        return 2

    # no option prefix of its own: every word after `lab` (`--help`, `--dir X` included) is
    # taken as it comes, never refused as an unknown option
    command = sub.add_parser(LAB_COMMAND[0], help=help_text, description=LAB_NOT_INSTALLED, add_help=False,
                             prefix_chars="\0")
    command.add_argument("words", nargs=argparse.REMAINDER)
    command.set_defaults(_run=not_installed)


def restrict_umask() -> None:
    """Nothing sparkbase writes (render output, locks, logs, reports) is group- or
    world-writable, whatever umask the operator runs with: 022 is always masked."""
    os.umask(os.umask(0o022) | 0o022)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit status.

    Everything printed goes through `sparkbase.text.TerminalStream`: no user-controlled text
    reaches the terminal with its control characters interpreted.
    """
    saved = sys.stdout, sys.stderr
    sys.stdout = TerminalStream(saved[0])
    sys.stderr = TerminalStream(saved[1])
    try:
        return _main(argv, saved)
    finally:
        sys.stdout, sys.stderr = saved


def _main(argv: Sequence[str] | None, real: tuple[IO[str], IO[str]]) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(words)
    args = parser.parse_args(words)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    restrict_umask()
    console.configure(args.no_color, *real)
    try:
        undo_logging = configure_logging(args.log_level, args.log_file)
    except LogFileError as exc:
        print(f"sparkbase: --log-file {shown(args.log_file)}: {exc}", file=sys.stderr)
        console.configure(False)
        return 2
    log = logging.getLogger(__name__)
    log.debug("sparkbase %s, arguments: %s", __version__, " ".join(sys.argv[1:] if argv is None else argv))
    started = time.monotonic()
    status = INTERNAL_ERROR
    try:
        status = _run(args)
        return status
    except SystemExit as exc:  # a command's own exit (e.g. 2 from a bad site)
        status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        raise
    finally:
        log.info("%s: exit %d (%.2fs)", args.command, status, time.monotonic() - started)
        undo_logging()
        console.configure(False)  # the streams were this run's


def _reader_gone() -> int:
    """Whoever read stdout went away (`sparkbase triggers | head`): not an error of sparkbase.
    Exit as a process killed by SIGPIPE would (141), quietly; stdout is pointed at /dev/null
    so the interpreter's final flush cannot fail again (Python's documented remedy)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ is not None else 1)
    except OSError:
        pass
    return 141


def _run(args: argparse.Namespace) -> int:
    """Run the command; a configuration error is exit 2, an unexpected one exit 70."""
    try:
        status: int = args._run(args)
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem.format(Path.cwd()), file=sys.stderr)
        print("sparkbase: bad configuration; nothing was done", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sparkbase: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _reader_gone()
    except Exception as exc:  # the one place an unexpected error becomes exit 70
        return internal_error(exc, args.debug)
    return status


def internal_error(exc: BaseException, debug: bool) -> int:
    """Report an unexpected exception in one line (the traceback only with `debug`)."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    message = shown(str(exc))
    if len(message) > INTERNAL_MESSAGE_LIMIT:
        message = message[: INTERNAL_MESSAGE_LIMIT - 1] + "…"
    hint = "" if debug else " (sparkbase --debug … prints the traceback)"
    print(f"sparkbase: internal error: {type(exc).__name__}: {message}{hint}; please report it",
          file=sys.stderr)
    # the log file keeps the traceback; stderr already said it in one line
    logging.getLogger(__name__).error("internal error: %s: %s", type(exc).__name__, message, exc_info=exc,
                                      extra={SHOWN_ON_STDERR: True})
    return INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
