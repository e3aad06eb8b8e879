"""What people see: tables drawn by rich on a terminal, plain text elsewhere, user text literal.

A node name or reason with rich markup (`[bold]`) or an escape sequence must print as typed
(escaped), whichever rendering is chosen; plain output has no ANSI and no box drawing.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbase import console
from sparkbase.audit.reports import audit_table
from sparkbase.audit.run import AuditReport, NodeReport
from sparkbase.console import Column, Progress, Table, plain_table, print_table

#: a node name and an unreachable reason written to fool a terminal or rich's markup parser
HOSTILE_NODE = "[bold]s9"
HOSTILE_REASON = "refused [red]PASS[/red] :smile: \x1b[5mblink\x1b]0;title\x07"
BOX_CHARS = "─│┃━┏┓└┘╭╮"


class FakeTerminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTerminal]:
    """stdout and stderr are one colour terminal (console configured as the CLI does)."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "200")
    screen = FakeTerminal()
    console.configure(False, screen, screen)
    yield screen
    console.configure(False)


def _hostile_report() -> AuditReport:
    node = NodeReport(HOSTILE_NODE, "site-stock-6.17-4k", "1.1.0", False, HOSTILE_REASON, ())
    return AuditReport("four-spark-ring", 0.0, 0.1, (node,))


PLAIN_CASES = [
    pytest.param(
        Table((Column("A"), Column("BB")), [("x", "y"), ("longer", "z")]),
        "A       BB\nx       y\nlonger  z\n",
        id="aligned-two-spaces-trailing-stripped",
    ),
    pytest.param(
        Table((Column("N", align="right"), Column("NAME")), [("7", "a"), ("1234", "b")]),
        "   N  NAME\n   7  a\n1234  b\n",
        id="right-aligned",
    ),
    pytest.param(
        Table((Column("CHECK", max_width=6), Column("X")), [("kernel.release", "1")]),
        "CHECK   X\nkerne…  1\n",
        id="clipped-with-ellipsis",
    ),
    pytest.param(Table((Column("A"),), []), "A\n", id="header-without-rows"),
    pytest.param(Table((Column("A"),), [], header_when_empty=False), "", id="nothing-without-rows"),
    pytest.param(
        Table((Column("NODE"),), [("a\x1b[31mb\nc",)]),
        "NODE\na\\x1b[31mb\\nc\n",
        id="control-characters-escaped",
    ),
]


@pytest.mark.parametrize(("table", "expected"), PLAIN_CASES)
def test_plain_table(table: Table, expected: str) -> None:
    assert plain_table(table) == expected


def test_rich_table_on_a_terminal_prints_user_text_literally(terminal: FakeTerminal) -> None:
    print_table(audit_table(_hostile_report()))
    drawn = terminal.getvalue()
    assert "\x1b[" in drawn and any(char in drawn for char in BOX_CHARS)  # rich drew it
    assert HOSTILE_NODE in drawn  # markup printed as typed, not applied
    assert "[red]PASS[/red]" in drawn and ":smile:" in drawn
    assert "\\x1b[5mblink\\x1b]0;title\\x07" in drawn  # the sequences shown, not sent
    assert "\x1b[5m" not in drawn and "\x1b]0;" not in drawn and "\x07" not in drawn


@pytest.mark.parametrize("why", ["--no-color", "NO_COLOR", "TERM=dumb", "not a terminal"])
def test_plain_when_colour_is_not_wanted_or_possible(
    why: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    screen: io.StringIO = FakeTerminal()
    if why == "--no-color":
        console.configure(True, screen, screen)
    else:
        if why == "NO_COLOR":
            monkeypatch.setenv("NO_COLOR", "1")
        elif why == "TERM=dumb":
            monkeypatch.setenv("TERM", "dumb")
        else:
            screen = io.StringIO()
        console.configure(False, screen, screen)
    try:
        table = audit_table(_hostile_report())
        print_table(table)
    finally:
        console.configure(False)
    printed = capsys.readouterr().out
    assert screen.getvalue() == ""  # nothing drawn on the terminal itself
    assert printed == plain_table(table)
    assert "\x1b" not in printed and not any(char in printed for char in BOX_CHARS)
    assert printed.splitlines()[1].startswith("[bold]s9  UNREACHABLE  reachable")


def test_progress_on_a_terminal_shows_steps_literally_and_leaves_no_bar(terminal: FakeTerminal) -> None:
    with Progress("apply [bold]", total=2) as progress:
        progress.step(f"{HOSTILE_NODE}: rebooting \x1b[5m")
        progress.done("spark1")
        progress.done("spark2")
    drawn = terminal.getvalue()
    assert f"{HOSTILE_NODE}: rebooting \\x1b[5m" in drawn
    assert "\x1b[5m" not in drawn
    assert "2/2" in drawn  # the count was shown while it ran


def test_progress_elsewhere_is_plain_lines_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    console.configure(False, io.StringIO(), io.StringIO())
    try:
        with Progress("apply", total=4) as progress:
            progress.step("spark2: rebooting (kernel \x1b[31m)")
            progress.done("spark2")
    finally:
        console.configure(False)
    captured = capsys.readouterr()
    assert captured.err == "spark2: rebooting (kernel \\x1b[31m)\n"
    assert captured.out == ""


def test_plan_summary_is_a_table_with_escaped_messages(capsys: pytest.CaptureFixture[str]) -> None:
    from sparkbase.cli.deploying import print_report
    from sparkbase.deploy.results import NodeResult, NodeStatus, OpResult, Report

    report = Report("plan", [
        NodeResult("spark1", "site-stock-6.17-4k", NodeStatus.WOULD_CHANGE,
                   [OpResult("grub", "file", "would change")], ["running kernel 6.17.0-1008"]),
        NodeResult("spark2", "site-stock-6.17-4k", NodeStatus.UNREACHABLE,
                   message="[bold]refused\nspark2  unchanged"),
    ])
    print_report(report, as_json=False, details=False)
    assert capsys.readouterr().out.splitlines() == [
        "plan summary:",
        "NODE    BASELINE            STATUS        DETAIL",
        "spark1  site-stock-6.17-4k  would change  1 change(s); reboot needed: running kernel 6.17.0-1008",
        "spark2  site-stock-6.17-4k  unreachable   no changes; [bold]refused\\nspark2  unchanged",
    ]


def test_plain_output_does_not_import_rich(shipped_site: Path) -> None:
    """The gate's paths print plain text when piped: rich (≈10–100 ms to import) stays out."""
    script = (
        "import sys\n"
        "from sparkbase.cli.main import main\n"
        f"code = main(['compare', 'site-stock-6.17-4k', 'ds41f-7x-64k', '--site', {str(shipped_site)!r}])\n"
        "from sparkbase.console import Progress\n"
        "with Progress('audit', total=2) as progress:\n"
        "    progress.done('spark1')\n"
        "print(code, sorted(name for name in sys.modules if name.split('.')[0] == 'rich'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TERM": "xterm-256color"})
    assert done.stdout.splitlines()[-1] == "0 []", done.stderr[-2000:]


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> str:
    """What `sparkbase ARGV` draws when stdout and stderr are a pseudo-terminal (read while
    it runs: a full terminal buffer would block it)."""
    import pty

    main_end, child_end = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "sparkbase.cli.main", *argv], stdin=subprocess.DEVNULL,
                               stdout=child_end, stderr=child_end, env=env)
    os.close(child_end)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(main_end, 65536)
            except OSError:  # EIO: the child closed its side and everything was read
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(main_end)
        status = process.wait(timeout=120)
    assert status == 0
    return b"".join(chunks).decode()


@pytest.mark.parametrize("plain", [None, "--no-color", "NO_COLOR"])
def test_the_cli_draws_on_a_terminal_unless_told_not_to(plain: str | None, shipped_site: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "NO_COLOR"}
    env.update(TERM="xterm-256color", COLUMNS="250")
    argv = ["compare", "site-stock-6.17-4k", "ds41f-7x-64k", "--site", str(shipped_site)]
    if plain == "--no-color":
        argv.append("--no-color")
    elif plain == "NO_COLOR":
        env["NO_COLOR"] = "1"
    drawn = _on_a_terminal(argv, env)
    assert "kernel.page_size" in drawn and "satisfies the site contract" in drawn
    styled = "\x1b[" in drawn or any(char in drawn for char in BOX_CHARS)
    assert styled is (plain is None), drawn[:500]
