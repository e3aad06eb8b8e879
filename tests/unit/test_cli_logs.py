"""The global `--log-level` and `--log-file`: what goes where, and a log file opened safely."""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from pathlib import Path

import pytest

from sparkbase.cli.logs import LogFileError, configure_logging, open_log_file
from sparkbase.cli.main import main
from sparkbase.console import Progress

LINE_SHAPE = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (DEBUG|INFO|WARNING|ERROR) sparkbase[.\w]*: "


def test_log_file_is_created_private_and_appended(tmp_path: Path, shipped_site: Path) -> None:
    log = tmp_path / "sparkbase.log"
    for _ in range(2):
        assert main(["--log-file", str(log), "validate", "--site", str(shipped_site)]) == 0
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and all("INFO sparkbase.cli.main: validate: exit 0" in line for line in lines)
    assert all(re.match(LINE_SHAPE, line) for line in lines)


def test_options_work_after_the_command_too(tmp_path: Path, shipped_site: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "after.log"
    code = main(["validate", "--site", str(shipped_site), "--no-color", "--log-level", "debug",
                 "--log-file", str(log)])
    assert code == 0
    assert "DEBUG sparkbase.cli.main: sparkbase " in log.read_text()
    assert "sparkbase: debug: sparkbase " in capsys.readouterr().err


def test_stderr_shows_warnings_by_default_not_info(shipped_site: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--site", str(shipped_site)]) == 0
    assert "sparkbase: info:" not in capsys.readouterr().err
    assert main(["--log-level", "info", "validate", "--site", str(shipped_site)]) == 0
    assert "sparkbase: info: validate: exit 0" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory", "missing-directory"])
def test_unsafe_log_files_are_refused(kind: str, tmp_path: Path, shipped_site: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    path = tmp_path / "log"
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path = tmp_path / "no-such-dir" / "log"
    started = time.monotonic()
    assert main(["--log-file", str(path), "validate", "--site", str(shipped_site)]) == 2
    assert time.monotonic() - started < 10  # a FIFO with no reader does not hang
    err = capsys.readouterr().err
    assert f"sparkbase: --log-file {path}: " in err and "Traceback" not in err
    assert victim.read_text() == "keep me\n"


def test_open_log_file_refuses_a_link_by_name(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(LogFileError, match="symbolic link"):
        open_log_file(tmp_path / "link")


def test_records_are_one_line_each_and_escaped(tmp_path: Path) -> None:
    log = tmp_path / "escaped.log"
    undo = configure_logging("debug", log)
    try:
        logging.getLogger("sparkbase.test").warning("node %s said %s", "spark1\x1b[2K", "a\nforged INFO line")
    finally:
        undo()
    lines = log.read_text().splitlines()
    assert len(lines) == 1
    assert lines[0].endswith("node spark1\\x1b[2K said a\\nforged INFO line")


def test_a_progress_step_is_logged_but_not_repeated_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "progress.log"
    undo = configure_logging("info", log)
    try:
        with Progress("apply", live=False) as progress:
            progress.step("spark2: rebooting (kernel)")
    finally:
        undo()
    assert capsys.readouterr().err == "spark2: rebooting (kernel)\n"  # once: the step itself
    assert "INFO sparkbase.progress: spark2: rebooting (kernel)" in log.read_text()


def test_undo_leaves_the_logger_as_it_was(tmp_path: Path) -> None:
    logger = logging.getLogger("sparkbase")
    before = (list(logger.handlers), logger.level, logger.propagate)
    configure_logging(None, tmp_path / "x.log")()
    assert (list(logger.handlers), logger.level, logger.propagate) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["--no-color", "--log-level", "info", "lab", "status"],
        ["lab", "--no-color", "--log-level", "info", "status"],
        ["lab", "status", "--no-color", "--log-level", "info"],
        ["lane", "status", "--log-level", "info", "--no-color"],
        ["audit", "--lab", "--no-color", "--log-level", "info"],
        ["--log-level", "error", "audit", "--no-color", "--log-level", "info"],  # the last one wins
    ],
    ids=["before", "after-command", "after-action", "lane-action", "among-options", "last-wins"],
)
def test_global_options_anywhere(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkbase.cli.main import build_parser

    monkeypatch.delenv("SPARKBASE_DEBUG", raising=False)
    args = build_parser().parse_args(argv)
    assert args.no_color is True and args.log_level == "info" and args.debug is False


def test_global_options_not_given_keep_their_defaults() -> None:
    from sparkbase.cli.main import build_parser

    args = build_parser().parse_args(["lab", "status"])
    assert (args.no_color, args.log_level, args.log_file) == (False, None, None)


@pytest.mark.parametrize(
    "argv",
    [
        ["preflight", "dsv41-flash", "--log", "overrides.log"],
        ["lane", "switch", "dsv41-flash", "--log", "overrides.log"],
        ["preflight", "dsv41-flash", "--log", "overrides.log", "--log-file", "run.log"],
    ],
    ids=["preflight", "lane-switch", "both"],
)
def test_a_commands_own_log_option_is_not_taken_for_a_global_one(argv: list[str]) -> None:
    from sparkbase.cli.main import build_parser

    args = build_parser().parse_args(argv)
    assert args.log == Path("overrides.log")
    assert args.log_file == (Path("run.log") if "--log-file" in argv else None)


def test_an_internal_error_is_one_line_on_stderr_and_a_traceback_in_the_log(
    tmp_path: Path, shipped_site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("unexpected\x1b[2J state")

    monkeypatch.setattr("sparkbase.cli.compare.compare_baselines", boom)
    log = tmp_path / "crash.log"
    status = main(["--log-file", str(log), "compare", "site-stock-6.17-4k", "ds41f-7x-64k",
                   "--site", str(shipped_site)])
    assert status == 70
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err  # stderr: still the one line
    kept = log.read_text()
    assert "ERROR sparkbase.cli.main: internal error: RuntimeError: unexpected\\x1b[2J state" in kept
    assert "Traceback (most recent call last)" in kept and "in boom" in kept and "\x1b" not in kept
    assert "INFO sparkbase.cli.main: compare: exit 70" in kept
