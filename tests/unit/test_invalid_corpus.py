"""Bad inputs as data: every case under tests/cases/invalid/ must be refused, located.

A case is a folder with `case.yaml`:

    about: what is wrong
    edit:        # text substitutions on a copy of the shipped site (each `find` occurs once)
      - {file: baselines/site-stock-6.17-4k.yaml, find: "page_size: 4096", replace: "..."}
    write:       # whole files written as given (added or replacing)
      lanes/glm-fp8.yaml: "..."
    generate:    # inputs too big or too binary to keep as text
      - {file: lanes/glm-fp8.yaml, kind: huge|deep|latin1|bytes|fifo|symlink|directory, ...}
    expect:      # problems that must be reported: site-relative file, line, message substring
      - {file: lanes/glm-fp8.yaml, line: 7, message: "needs 4 nodes"}

`validate` must exit 2 printing each expected problem as `FILE:LINE:COL: ...`, and
`render` must exit 2 without writing anything.

Speed: every case loads its site three times (validate, validate --json, render), and all
but one or two of its files are the shipped ones, the same in every case: the cases parse
each distinct file content once (`parsed_once`, tests/unit/site_memo.py). A sample of cases also
runs without it and must print the same.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from site_memo import load_yaml_memoised

from sparkbase.cli.main import main
from sparkbase.model import site as site_module
from sparkbase.model.yamlio import load_yaml

CASES = Path(__file__).resolve().parents[1] / "cases" / "invalid"
CASE_NAMES = sorted(path.name for path in CASES.iterdir() if (path / "case.yaml").is_file())
#: cases also run without the parse memo (one of every kind of input), compared output to output
UNMEMOISED = ("fabric-hca-wrong", "yaml-undefined-alias", "yaml-duplicate-key", "file-not-utf8",
              "file-fifo-lane", "file-huge", "rule-extends-cycle", "sources-placeholder-without-note")


def load_case(name: str) -> dict[str, Any]:
    """The case's definition."""
    data: dict[str, Any] = YAML(typ="safe").load((CASES / name / "case.yaml").read_text())
    return data


def build_site(case: dict[str, Any], root: Path, make_site: Callable[[Path], Path]) -> Path:
    """A copy of the shipped site with the case's changes applied."""
    site = make_site(root)
    for edit in case.get("edit", []):
        file = site / edit["file"]
        text = file.read_text()
        assert text.count(edit["find"]) == 1, f"{edit['find']!r} must occur once in {edit['file']}"
        file.write_text(text.replace(edit["find"], edit["replace"]))
    for relative, content in case.get("write", {}).items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_text(content)
    for spec in case.get("generate", []):
        target = site / spec["file"]
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_file() or target.is_symlink():
            target.unlink()
        if not _made_special(spec, target):
            target.write_bytes(_generated(spec))
    return site


def _made_special(spec: dict[str, Any], target: Path) -> bool:
    """Site entries that are not regular files: a FIFO, a symlink, a directory."""
    kind = spec["kind"]
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "symlink":
        target.symlink_to(spec["target"])
    elif kind == "directory":
        target.mkdir()
    else:
        return False
    return True


def _generated(spec: dict[str, Any]) -> bytes:
    kind = spec["kind"]
    if kind == "huge":  # a valid lane followed by padding comments past the size limit
        line = b"# " + b"x" * 98 + b"\n"
        return str(spec["prefix"]).encode() + line * (int(spec["bytes"]) // len(line) + 1)
    if kind == "deep":  # block mappings nested `depth` levels
        return "".join(f"{'  ' * level}k{level}:\n" for level in range(int(spec["depth"]))).encode()
    if kind == "deep-flow":  # flow sequences nested `depth` levels
        depth = int(spec["depth"])
        return ("x: " + "[" * depth + "]" * depth + "\n").encode()
    if kind == "latin1":  # text encoded as Latin-1: not UTF-8 where it has accents
        return str(spec["text"]).encode("latin-1")
    if kind == "bytes":  # arbitrary bytes given as a hex string
        return bytes.fromhex(spec["hex"])
    raise AssertionError(f"unknown generator {kind}")


def test_corpus_is_large_enough() -> None:
    assert len(CASE_NAMES) >= 150


def check_case(name: str, root: Path, make_site: Callable[[Path], Path],
               capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """Build the case's site under `root`, check validate (text and JSON) and render refuse
    it as the case expects; the text validate printed."""
    case = load_case(name)
    site = build_site(case, root / "site", make_site)
    monkeypatch.chdir(site)

    assert main(["validate", "--site", str(site)]) == 2
    text = capsys.readouterr().out
    lines = text.splitlines()
    for expected in case["expect"]:
        prefix = f"{expected['file']}:{expected['line']}:"
        hits = [line for line in lines if line.startswith(prefix) and expected["message"] in line]
        assert hits, f"expected {prefix} ... {expected['message']!r}; got:\n{text}"
    assert "Traceback" not in text

    assert main(["validate", "--site", str(site), "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False
    for problem in report["problems"]:
        assert problem["file"] and problem["line"] >= 1 and problem["column"] >= 1 and problem["message"]

    out = root / "out"
    with pytest.raises(SystemExit) as exited:
        main(["render", "--site", str(site), "--out", str(out)])
    assert exited.value.code == 2
    assert not out.exists() or not any(out.iterdir())
    return text


@pytest.mark.parametrize("name", CASE_NAMES)
def test_invalid_case(
    name: str,
    tmp_path: Path,
    parsed_once: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    make_site: Callable[[Path], Path],
) -> None:
    check_case(name, tmp_path, make_site, capsys, monkeypatch)


@pytest.mark.parametrize("name", UNMEMOISED)
def test_the_parse_memo_changes_nothing(
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    make_site: Callable[[Path], Path],
) -> None:
    assert name in CASE_NAMES
    monkeypatch.setattr(site_module, "load_yaml", load_yaml)  # whatever `parsed_once` left
    plain = check_case(name, tmp_path / "plain", make_site, capsys, monkeypatch)
    monkeypatch.setattr(site_module, "load_yaml", lambda file: load_yaml_memoised(load_yaml, file))
    for attempt in ("fills", "reads"):  # the first run fills the memo, the second reads from it
        memo = check_case(name, tmp_path / attempt, make_site, capsys, monkeypatch)
        assert memo == plain.replace(str(tmp_path / "plain"), str(tmp_path / attempt))
