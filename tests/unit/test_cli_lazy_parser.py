"""The parser built for one command line: only the named command gets its options (and its
module imported), and nothing a user sees changes: help, usage and errors are those of the
parser with every command built."""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys

import pytest

from sparkbase.cli.main import COMMANDS, build_parser, invoked_command

#: command line -> the command it names (None: none)
INVOKED = {
    "": None,
    "--help": None,
    "audit": "audit",
    "audit --format json": "audit",
    "--no-color audit": "audit",
    "--log-level debug preflight dsv41-flash": "preflight",
    "--log-level=debug lab up": "lab",
    "--log-file /tmp/audit lane status": "lane",
    "--log-level": None,
    "-- audit": "audit",
    "bogus --help": "bogus",
}


@pytest.mark.parametrize(("line", "command"), INVOKED.items(), ids=[repr(k) for k in INVOKED])
def test_the_invoked_command_is_found(line: str, command: str | None) -> None:
    assert invoked_command(line.split()) == command


def _output(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[str, str, object]:
    """What parsing `argv` prints (stdout, stderr) and how it ends (exit code or the
    command parsed)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            ended: object = vars(parser.parse_args(argv)).get("command")
        except SystemExit as exc:
            ended = exc.code
    return out.getvalue(), err.getvalue(), ended


LINES = [
    ["--help"], [], ["bogus"], ["--log-level", "audit"], ["--version"],
    *([name, "--help"] for name in COMMANDS),
    ["audit", "--bogus"], ["preflight"], ["--debug", "audit", "--format", "nope"],
    ["lab", "up", "--help"], ["lane", "status", "--help"],
]


@pytest.mark.parametrize("argv", LINES, ids=[" ".join(line) or "(none)" for line in LINES])
def test_a_lazy_parser_prints_what_the_full_one_prints(argv: list[str], monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert _output(build_parser(argv), argv) == _output(build_parser(), argv)


def test_only_the_invoked_commands_module_is_imported() -> None:
    code = (
        "import sys\nfrom sparkbase.cli.main import build_parser\n"
        "build_parser(['--no-color', 'audit', '--help-not-parsed'])\n"
        "print(' '.join(m for m in sys.modules if m.startswith('sparkbase.cli.')))"
    )
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                timeout=60).stdout.split())
    assert loaded == {"sparkbase.cli.main", "sparkbase.cli.common", "sparkbase.cli.logs",
                      "sparkbase.cli.audit"}
