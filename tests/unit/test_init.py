"""`sparkbase init DIR`: the shipped example as a starter site, owning only what it wrote."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path, PurePosixPath

import pytest

from sparkbase.cli.main import main
from sparkbase.starter import STARTER_GLOBS, site_files, starter_files, starter_root
from sparkbase.starter.write import RECORD, Outcome, write_starter

REPO = Path(__file__).resolve().parents[2]


def tracked_site_files() -> set[str]:
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "baselines", "inventory", "lanes"],
                            capture_output=True, text=True, check=True).stdout.split()
    return {path for path in listed if path.endswith(".yaml")}


def test_starter_is_the_shipped_example_without_generated_files() -> None:
    assert starter_root() == REPO  # a source checkout reads the repository's own files
    files = starter_files()
    assert {str(rel) for rel in files} == tracked_site_files()
    assert PurePosixPath("baselines/sparkbase.lock") not in files
    assert all(not str(rel).startswith(".sparkbase") for rel in files)
    for rel, data in files.items():
        assert (REPO / rel).read_bytes() == data


def test_setup_py_packages_the_same_rule() -> None:
    # the wheel build copies site_files(repo) into sparkbase/starter/site (tests/e2e/test_wheel.py
    # checks the wheel); the rule has one home
    text = (REPO / "setup.py").read_text()
    assert "starter.site_files(HERE)" in text
    manifest = (REPO / "MANIFEST.in").read_text()
    for pattern in STARTER_GLOBS:
        assert pattern in manifest


def test_init_writes_a_valid_site(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "new" / "site"
    assert main(["init", str(target)]) == 0
    out = capsys.readouterr().out
    assert f"starter site in {target}: 10 of 10 file(s) in place" in out
    assert "sparkbase validate" in out
    for rel, data in starter_files().items():
        assert (target / rel).read_bytes() == data
    record = json.loads((target / RECORD).read_text())
    assert set(record["files"]) == {str(rel) for rel in starter_files()}
    assert main(["validate", "--site", str(target)]) == 0


def test_non_empty_dir_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    assert main(["init", str(tmp_path)]) == 2
    assert "is not empty: nothing written" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x")
    assert main(["init", str(tmp_path / "f")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_force_never_overwrites_what_init_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "lanes" / "glm-fp8.yaml"
    mine.parent.mkdir()
    mine.write_text("# my lane\n")
    assert main(["init", str(tmp_path), "--force"]) == 1
    err = capsys.readouterr().err
    assert f"kept {mine}: not written by init" in err
    assert mine.read_text() == "# my lane\n"
    assert (tmp_path / "baselines" / "site.yaml").is_file()  # the rest was added
    assert "lanes/glm-fp8.yaml" not in json.loads((tmp_path / RECORD).read_text())["files"]


V1 = {PurePosixPath("lanes/a.yaml"): b"one\n", PurePosixPath("lanes/b.yaml"): b"two\n"}
V2 = {PurePosixPath("lanes/a.yaml"): b"ONE\n", PurePosixPath("lanes/b.yaml"): b"TWO\n"}


@pytest.mark.parametrize(
    ("edit", "a_outcome", "a_after"),
    [
        (None, Outcome.REPLACED, b"ONE\n"),  # init's, unchanged: refreshed
        (b"edited\n", Outcome.KEPT, b"edited\n"),  # changed since: the user's now
        (b"ONE\n", Outcome.SAME, b"ONE\n"),  # already what the starter holds
    ],
)
def test_force_refreshes_only_unchanged_files_it_wrote(
    tmp_path: Path, edit: bytes | None, a_outcome: Outcome, a_after: bytes
) -> None:
    write_starter(tmp_path, V1, force=False)
    if edit is not None:
        (tmp_path / "lanes" / "a.yaml").write_bytes(edit)
    report = write_starter(tmp_path, V2, force=True)
    assert report.outcomes[PurePosixPath("lanes/a.yaml")] is a_outcome
    assert report.outcomes[PurePosixPath("lanes/b.yaml")] is Outcome.REPLACED
    assert (tmp_path / "lanes" / "a.yaml").read_bytes() == a_after


def test_force_never_follows_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_bytes(b"outside\n")
    site = tmp_path / "site"
    (site / "lanes").mkdir(parents=True)
    (site / "lanes" / "a.yaml").symlink_to(outside)
    report = write_starter(site, V1, force=True)
    assert report.outcomes[PurePosixPath("lanes/a.yaml")] is Outcome.KEPT
    assert outside.read_bytes() == b"outside\n"


def test_site_files_skip_links_and_other_files(tmp_path: Path) -> None:
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "site.yaml").write_text("x")
    (tmp_path / "baselines" / "sparkbase.lock").write_text("{}")
    (tmp_path / "baselines" / "link.yaml").symlink_to(tmp_path / "baselines" / "site.yaml")
    assert list(site_files(tmp_path)) == [PurePosixPath("baselines/site.yaml")]
