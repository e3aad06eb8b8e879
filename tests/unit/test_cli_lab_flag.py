"""`--lab` is a plain flag (it never swallows the next word); `--lab-dir DIR` names the lab."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbase.cli.common import lab_path
from sparkbase.cli.main import build_parser

DEFAULT_LAB = Path("/var/lib/sparkbase/lab")

#: argv, the lane/node/command word it must parse, the lab directory lab_path must give
CASES: list[tuple[list[str], str, str, Path | None]] = [
    (["preflight", "--lab", "dsv41-flash"], "lane", "dsv41-flash", DEFAULT_LAB),
    (["preflight", "dsv41-flash", "--lab"], "lane", "dsv41-flash", DEFAULT_LAB),
    (["preflight", "--lab", "--lab-dir", "/tmp/x", "glm-fp8"], "lane", "glm-fp8", Path("/tmp/x")),
    (["preflight", "--lab-dir", "/tmp/x", "glm-fp8"], "lane", "glm-fp8", Path("/tmp/x")),
    (["preflight", "glm-fp8"], "lane", "glm-fp8", None),
    (["capture", "--lab", "spark1"], "node", "spark1", DEFAULT_LAB),
    (["lane", "switch", "--lab", "glm-fp8"], "lane", "glm-fp8", DEFAULT_LAB),
    (["audit", "--lab", "--limit", "spark2"], "command", "audit", DEFAULT_LAB),
    (["apply", "--lab-dir", "/tmp/y"], "command", "apply", Path("/tmp/y")),
]


@pytest.mark.parametrize(("argv", "field", "value", "lab"), CASES)
def test_lab_is_a_plain_flag(
    argv: list[str], field: str, value: str, lab: Path | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPARKBASE_LAB_DIR", raising=False)
    args = build_parser().parse_args(argv)
    assert getattr(args, field) == value
    assert lab_path(args) == lab


def test_lab_dir_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKBASE_LAB_DIR", "/tmp/env-lab")
    args = build_parser().parse_args(["audit", "--lab"])
    assert lab_path(args) == Path("/tmp/env-lab")


def test_lab_takes_no_value(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["audit", "--lab=/tmp/x"])
    assert exc.value.code == 2
    assert "ignored explicit argument" in capsys.readouterr().err
