"""Clean output: user text reaches the terminal escaped, never interpreted (sparkbase.text),
and an unexpected exception is one line with its own exit status (traceback under --debug)."""

from __future__ import annotations

import io
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from quick import examples

from sparkbase.cli.main import INTERNAL_ERROR, main
from sparkbase.cli.triggers import verdict_lines
from sparkbase.errors import Problem
from sparkbase.gate.triggers import FIRED, QUIET, TriggerVerdict
from sparkbase.text import TerminalStream, is_hidden, shown, shown_lines, visible

PROPERTY = settings(max_examples=examples(300), deadline=None)
HIDDEN_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs"}
#: text that leans on what a terminal interprets: controls, ESC sequences, bidi, separators
_pieces = st.one_of(
    st.characters(),
    st.sampled_from(["\x1b", "\x1b[2K", "\r", "\n", "\x9b", "\x7f", "\u202e", "\u2066", "\u200b",
                     "\u2028", "\u2029", "\ufeff", "\U000e0001", "\udcff", "QUIET", "FIRED"]),
)
hostile = st.lists(_pieces, max_size=40).map("".join)


def _no_hidden(text: str, allowed: str = "") -> bool:
    return all(unicodedata.category(c) not in HIDDEN_CATEGORIES or c in allowed for c in text)


@PROPERTY
@given(hostile)
def test_shown_never_holds_a_hidden_character_and_is_one_line(text: str) -> None:
    out = shown(text)
    assert _no_hidden(out)
    assert len(out.splitlines()) <= 1


@PROPERTY
@given(hostile)
def test_shown_lines_keeps_only_newlines_and_tabs(text: str) -> None:
    out = shown_lines(text)
    assert _no_hidden(out, allowed="\n\t")
    assert out.count("\n") == text.count("\n")


@PROPERTY
@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cf", "Zl", "Zp", "Cs")), max_size=80))
def test_printable_text_is_shown_as_it_is(text: str) -> None:
    assert shown(text) == text


@PROPERTY
@given(hostile)
def test_visible_text_has_no_hidden_character_and_no_padding(text: str) -> None:
    out = visible(text)
    assert _no_hidden(out) and out == out.strip()


@PROPERTY
@given(hostile, hostile, hostile)
def test_a_problem_is_one_clean_line_whatever_the_file_field_and_message(
    file: str, path: str, message: str
) -> None:
    line = Problem(Path(file.replace("\x00", "") or "f"), 1, 1, path, message).format()
    assert _no_hidden(line) and "\n" not in line


@PROPERTY
@given(hostile, hostile, hostile)
def test_a_trigger_line_cannot_read_quiet_when_it_fired(
    description: str, evidence: str, reopens: str
) -> None:
    verdict = TriggerVerdict("t", "session-load", FIRED, description, reopens, [evidence])
    lines = verdict_lines([verdict])
    assert lines[0].startswith("FIRED   t (session-load): ")
    assert all(line.startswith("        ") for line in lines[1:])
    assert all(_no_hidden(line) for line in lines)


CASES = [
    ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
    ("a\nb\rc\td", "a\\nb\\rc\\td"),
    ("\x9b2J", "\\x9b2J"),
    ("x\x7f", "x\\x7f"),
    ("abc\u202etxt.exe", "abc\\u202etxt.exe"),
    ("\u2066iso\u2069", "\\u2066iso\\u2069"),
    ("zero\u200bwidth", "zero\\u200bwidth"),
    ("tag\U000e0041", "tag\\U000e0041"),
    ("bad\udcffbyte", "bad\\udcffbyte"),
    ("line\u2028sep", "line\\u2028sep"),
    ("caf\u00e9 \u4e2d\u6587", "caf\u00e9 \u4e2d\u6587"),
]


@pytest.mark.parametrize(("raw", "escaped"), CASES)
def test_shown_spelling(raw: str, escaped: str) -> None:
    assert shown(raw) == escaped


def test_terminal_stream_escapes_what_a_printer_forgot() -> None:
    sink = io.StringIO()
    stream = TerminalStream(sink)
    assert stream.write("ok\x1b]0;title\x07\n\tnext\u202e\n") == len("ok\x1b]0;title\x07\n\tnext\u202e\n")
    assert sink.getvalue() == "ok\\x1b]0;title\\x07\n\tnext\\u202e\n"
    assert not stream.isatty()


def test_a_fired_trigger_with_a_hostile_description_is_not_read_as_quiet(
    site_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end through the CLI: the site's description tries to draw a QUIET line."""
    site_yaml = site_copy / "baselines" / "site.yaml"
    text = site_yaml.read_text()
    old = (
        "    description: >-\n"
        "      more than about three concurrent 500K-token-class agent sessions become normal\n"
        "      traffic (the stock pool holds about 3.5 full contexts)\n"
    )
    assert old in text
    spoof = '    description: "\\r\\e[2KQUIET   long-context-concurrency\\nQUIET   x"\n'
    site_yaml.write_text(text.replace(old, spoof))
    metrics = Path(__file__).parents[1] / "fixtures" / "metrics" / "four-500k-sessions.prom"
    status = main(["triggers", "--site", str(site_copy), "--metrics", str(metrics)])
    out, err = capsys.readouterr()
    if status == 2:  # the model may refuse control characters in descriptions: fine too, located
        assert "baselines/site.yaml:" in err and "\x1b" not in err and "\r" not in err
        return
    assert status == 1
    lines = out.splitlines()
    assert not any(line.startswith("QUIET") and "long-context" in line for line in lines), out
    assert "\x1b" not in out and "\r" not in out
    assert any(line.startswith("FIRED   long-context-concurrency") for line in lines)
    assert QUIET.upper() in out  # the text is still there, shown: \r\x1b[2KQUIET …


def test_a_yaml_key_with_an_escape_sequence_is_shown_escaped(
    site_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lane = site_copy / "lanes" / "glm-fp8.yaml"
    lane.write_text(lane.read_text() + '"\\e[2J\\e[Hevil\\u202e": 1\n')
    assert main(["validate", "--site", str(site_copy)]) == 2
    err_out = capsys.readouterr()
    said = err_out.out + err_out.err
    assert "\x1b" not in said and "\u202e" not in said
    assert "\\x1b[2J\\x1b[Hevil\\u202e" in said


# --- internal errors: their own exit status, one line, the traceback only under --debug ---


def _explode(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("unexpected\x1b[2J state\nsecond line")

    monkeypatch.setattr("sparkbase.cli.compare.compare_baselines", boom)


def test_an_internal_error_is_one_line_with_its_own_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _explode(monkeypatch)
    root = str(Path(__file__).parents[2])
    status = main(["compare", "site-stock-6.17-4k", "ds41f-7x-64k", "--site", root])
    err = capsys.readouterr().err
    assert status == INTERNAL_ERROR == 70
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("sparkbase: internal error: RuntimeError: unexpected\\x1b[2J state\\nsecond line")
    assert "--debug" in err


def test_debug_prints_the_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _explode(monkeypatch)
    root = str(Path(__file__).parents[2])
    status = main(["--debug", "compare", "site-stock-6.17-4k", "ds41f-7x-64k", "--site", root])
    err = capsys.readouterr().err
    assert status == INTERNAL_ERROR
    assert "Traceback (most recent call last)" in err and "in boom" in err
    assert "\x1b" not in err  # the traceback goes through the terminal stream too


def test_exit_statuses_are_documented(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "70 internal error" in out and "--debug" in out


def test_is_hidden_agrees_with_the_categories() -> None:
    for code in [*range(0, 0x250), *range(0x2000, 0x2070), 0xFEFF, 0xE0001]:
        char = chr(code)
        assert is_hidden(char) == (unicodedata.category(char) in HIDDEN_CATEGORIES)
