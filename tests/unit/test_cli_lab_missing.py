"""`sparkbase lab ...` without the emulated fleet installed (issue 23.5: the lab is its own
distribution, `sparkbase-lab`, and the `lab` command is its module `sparkbase_lab.cli`): one
line saying how to install it, exit 2, no traceback, whatever follows (its help too); the main
help still lists it, and `--lab-dir` on other commands needs no lab code."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sparkbase.cli.main import LAB_NOT_INSTALLED, build_parser, main


@pytest.fixture
def no_lab(monkeypatch: pytest.MonkeyPatch) -> None:
    """An install of sparkbase alone: `import sparkbase_lab` (and its modules) fail."""
    for name in [m for m in sys.modules if m == "sparkbase_lab" or m.startswith("sparkbase_lab.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sparkbase_lab", None)


ACTIONS = [["status"], ["up", "--nodes", "1"], ["down"], ["fault", "spark1", "hang"], ["--help"], []]


@pytest.mark.parametrize("action", ACTIONS)
def test_a_lab_action_without_the_lab_says_how_to_install_it(
    no_lab: None, action: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["lab", "--dir", str(tmp_path / "lab"), *action])
    out, err = capsys.readouterr()
    assert status == 2
    assert err.strip() == LAB_NOT_INSTALLED
    assert "pip install sparkbase-lab" in err and "Traceback" not in err and out == ""
    assert not (tmp_path / "lab").exists()


def test_the_main_help_lists_the_lab_without_it(no_lab: None, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    assert "the emulated fleet" in capsys.readouterr().out


def test_a_broken_lab_is_not_reported_as_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Only the lab's own absence is "not installed": a module missing inside it is a real error."""
    for name in [m for m in sys.modules if m.startswith("sparkbase_lab.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sparkbase_lab.fleet", None)
    with pytest.raises(ModuleNotFoundError):
        build_parser(["lab", "--dir", str(tmp_path), "status"])


def test_lab_dir_on_other_commands_reads_only_the_lab_files(
    no_lab: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`audit --lab-dir DIR` reads DIR/ssh_config and known_hosts (transport/targets.py), not the
    lab's code: with no lab installed and no lab there it fails as a missing lab, not an import."""
    status = main(["audit", "--site", str(Path(__file__).resolve().parents[2]), "--lab-dir",
                   str(tmp_path / "nolab")])
    _, err = capsys.readouterr()
    assert status != 0
    assert "sparkbase_lab" not in err and "not installed" not in err and "Traceback" not in err
