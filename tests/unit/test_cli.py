"""The real entry point: validate, schema, usage errors, and one run as a process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkbase.cli.main import main


def _line_of(path: Path, start: str) -> int:
    """The 1-based number of the one line of `path` that starts with `start`."""
    found = [n for n, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(start)]
    assert len(found) == 1, found
    return found[0]


def test_validate_shipped_site(
    shipped_site: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(shipped_site)
    assert main(["validate"]) == 0
    lines = capsys.readouterr().out.splitlines()
    site_file = "baselines/site-stock-6.17-4k.yaml"
    driver_line = _line_of(shipped_site / site_file, "  driver: {kind: placeholder")
    placeholder = f"{site_file}:{driver_line}:3: warning: sources.driver: placeholder:"
    assert any(line.startswith(placeholder) for line in lines)
    assert any(
        "warning:" in line and "'ds41f-7x-64k' breaks the site contract and cannot be assigned" in line
        for line in lines
    )
    assert re.match(
        r"sparkbase: the site is valid \(\d+ warning\(s\), \d+ placeholder value\(s\) to confirm\): "
        r"3 baseline\(s\)",
        lines[-1],
    )
    assert "4 node(s)" in lines[-1] and "4 lane(s) (3 enabled)" in lines[-1]


def test_validate_json_shape(shipped_site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--json", "--site", str(shipped_site)]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert set(report) == {"format", "valid", "problems", "placeholders", "summary"}
    assert report["format"] == 2 and report["valid"] is True
    assert set(report["summary"]) == {"baselines", "abstract_baselines", "nodes", "lanes"}
    assert report["summary"]["nodes"]["spark1"] == "site-stock-6.17-4k"
    assert report["summary"]["lanes"]["ds41f-ring4"] is False
    for problem in report["problems"]:
        assert set(problem) == {"file", "line", "column", "path", "message", "severity"}
        assert problem["severity"] == "warning"


def test_validate_reports_every_problem_at_once(
    site_copy: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lane = site_copy / "lanes" / "glm-fp8.yaml"
    lane.write_text(lane.read_text().replace("engine: vllm", "engine: trt"))
    inventory = site_copy / "inventory" / "site.yaml"
    inventory.write_text(inventory.read_text().replace("    rank: 3\n", "    rank: 2\n"))
    monkeypatch.chdir(site_copy)
    assert main(["validate"]) == 2
    out = capsys.readouterr().out
    assert "lanes/glm-fp8.yaml:3:1: engine:" in out
    assert "inventory/site.yaml:64:5: nodes.spark4.rank: rank 2 is also spark3's" in out
    assert "sparkbase: the site is invalid: 2 error(s)" in out


def test_no_site_here(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--site", str(tmp_path)]) == 2
    assert "no site here" in capsys.readouterr().out


def required_lists(node: Any) -> list[Any]:
    """Every JSON Schema `required` list inside `node` (not properties named `required`)."""
    if isinstance(node, dict):
        found = [node["required"]] if isinstance(node.get("required"), list) else []
        return found + [item for value in node.values() for item in required_lists(value)]
    if isinstance(node, list):
        return [item for value in node for item in required_lists(value)]
    return []


def test_schema_for_editors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "baseline.schema.json"
    assert main(["schema", "--output", str(out)]) == 0
    schema = json.loads(out.read_text())
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["additionalProperties"] is False  # unknown keys are refused in editors too
    assert {"kernel", "nccl", "memory", "extends"} <= set(schema["properties"])
    assert not required_lists(schema)  # a file may inherit any field through extends
    assert "KernelSpec" in schema["$defs"]
    lane = tmp_path / "lane.schema.json"
    assert main(["schema", "--lane", "--output", str(lane)]) == 0
    lanes = json.loads(lane.read_text())
    assert lanes["$id"].endswith("/lane.json") and lanes["additionalProperties"] is False
    assert {"name", "image"} <= set(lanes["$defs"]["ContainerRuntime"]["required"])
    assert {"node", "port"} <= set(lanes["$defs"]["LaneEndpoint"]["properties"])
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == schema


def test_schema_help_explains_vscode(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["schema", "--help"])
    assert "yaml.schemas" in capsys.readouterr().out


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkbase.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_process_exit_codes_and_no_traceback(site_copy: Path, tmp_path: Path) -> None:
    assert run_cli("validate", cwd=site_copy).returncode == 0
    lane = site_copy / "lanes" / "glm-fp8.yaml"
    lane.write_text('model: !!python/object/apply:os.system ["echo pwned"]\n')
    bad = run_cli("validate", cwd=site_copy)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stdout + bad.stderr
    assert "pwned" not in bad.stdout.replace("echo pwned", "")
    assert "lanes/glm-fp8.yaml:1:" in bad.stdout
    rendered = run_cli("render", "--out", str(tmp_path / "out"), cwd=site_copy)
    assert rendered.returncode == 2 and "Traceback" not in rendered.stderr
    assert not (tmp_path / "out").exists()
    usage = run_cli("compare", cwd=site_copy)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for command in ("validate", "render", "lock", "compare", "schema"):
        assert command in out


def test_a_reader_that_goes_away_is_not_an_internal_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sparkbase validate | head -1`: the write that meets the closed pipe ends the run
    quietly (141, as SIGPIPE would), never as exit 70 with an internal-error line."""
    import sparkbase.cli.validate

    def reader_gone(_args: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sparkbase.cli.validate, "run", reader_gone)
    monkeypatch.setattr("sparkbase.cli.main._reader_gone", lambda: 141)  # keeps pytest's stdout
    assert main(["validate"]) == 141
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err
