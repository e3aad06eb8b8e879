"""The lock gate: a baseline whose render changes must have its version bumped."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkbase.cli.main import main
from sparkbase.model.site import load_site
from sparkbase.release import (
    LOCK_FORMAT,
    IssueKind,
    LockEntry,
    LockFileError,
    check_lock,
    read_lock,
)

STOCK = "site-stock-6.17-4k"


def edit(site: Path, relative: str, old: str, new: str) -> None:
    path = site / relative
    text = path.read_text()
    assert text.count(old) >= 1
    path.write_text(text.replace(old, new))


def bump_stock(site: Path, version: str) -> None:
    """Bump the stock baseline and requalify the lanes on it (a lane pins its version)."""
    current = load_site(site).baselines[STOCK].version
    edit(site, f"baselines/{STOCK}.yaml", f"version: {current}", f"version: {version}")
    for lane in ("dsv41-flash", "glm-fp8", "glm-nvfp4"):
        edit(site, f"lanes/{lane}.yaml", f"baseline_version: {current}", f"baseline_version: {version}")


def test_shipped_lock_holds(shipped_site: Path) -> None:
    assert main(["lock", "--check", "--allow-placeholders", "--site", str(shipped_site)]) == 0


def test_changed_sysctl_without_bump_is_caught_then_passes_after_bump_and_lock(
    site_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(site_copy, f"baselines/{STOCK}.yaml", "vm.max_map_count: 1048576", "vm.max_map_count: 2097152")
    assert main(["lock", "--check", "--allow-placeholders", "--site", str(site_copy)]) == 1
    err = capsys.readouterr().err
    assert f"bump version in baselines/{STOCK}.yaml" in err
    assert "ds41f" not in err  # only the changed baseline is named

    assert main(["lock", "--site", str(site_copy)]) == 1  # writing refuses too
    assert f"bump version in baselines/{STOCK}.yaml" in capsys.readouterr().err

    bump_stock(site_copy, "1.1.1")
    # bumped, lock not re-run
    assert main(["lock", "--check", "--allow-placeholders", "--site", str(site_copy)]) == 1
    assert "run `sparkbase lock`" in capsys.readouterr().err
    assert main(["lock", "--site", str(site_copy)]) == 0
    assert main(["lock", "--check", "--allow-placeholders", "--site", str(site_copy)]) == 0
    recorded = read_lock(site_copy / "baselines" / "sparkbase.lock")
    assert recorded is not None and recorded[STOCK].version == "1.1.1"


def test_force_records_an_unbumped_change(site_copy: Path) -> None:
    edit(site_copy, f"baselines/{STOCK}.yaml", "vm.max_map_count: 1048576", "vm.max_map_count: 2097152")
    assert main(["lock", "--force", "--site", str(site_copy)]) == 0
    assert main(["lock", "--check", "--allow-placeholders", "--site", str(site_copy)]) == 0


def test_missing_lock_names_every_baseline(site_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (site_copy / "baselines" / "sparkbase.lock").unlink()
    assert main(["lock", "--check", "--allow-placeholders", "--site", str(site_copy)]) == 1
    err = capsys.readouterr().err
    for name in ("ds41f-7x-64k", "ds41f-stock-pages-262k", STOCK):
        assert f"{name}: not in the lock" in err


def test_new_baseline_missing_from_lock(site_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = site_copy / "baselines" / f"{STOCK}.yaml"
    (site_copy / "baselines" / "site-stock-copy.yaml").write_text(source.read_text())
    assert main(["lock", "--check", "--allow-placeholders", "--site", str(site_copy)]) == 1
    assert "site-stock-copy: not in the lock" in capsys.readouterr().err


def test_written_lock_has_format_and_no_temp_files(site_copy: Path) -> None:
    lock = site_copy / "baselines" / "sparkbase.lock"
    lock.unlink()
    assert main(["lock", "--site", str(site_copy)]) == 0
    document = json.loads(lock.read_text())
    assert document["format"] == LOCK_FORMAT
    assert set(document["baselines"]) == {"ds41f-7x-64k", "ds41f-stock-pages-262k", STOCK}
    assert all(len(entry["digest"]) == 64 for entry in document["baselines"].values())
    assert [p.name for p in lock.parent.iterdir() if p.name.startswith(".")] == []
    assert not list(site_copy.glob("baselines/*.tmp"))


def test_unreadable_lock_is_a_usage_error(site_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (site_copy / "baselines" / "sparkbase.lock").write_text("{not json")
    assert main(["lock", "--check", "--allow-placeholders", "--site", str(site_copy)]) == 2
    assert "not JSON" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: os.mkfifo(p), "is a FIFO"),
        (lambda p: p.symlink_to("/dev/zero"), "is a character device"),
        (lambda p: p.mkdir(), "is a directory"),
    ],
)
def test_a_lock_that_is_not_a_regular_file_is_refused_not_read(
    site_copy: Path, capsys: pytest.CaptureFixture[str], make: Callable[[Path], object], said: str
) -> None:
    lock = site_copy / "baselines" / "sparkbase.lock"
    lock.unlink()
    make(lock)
    assert main(["lock", "--check", "--allow-placeholders", "--site", str(site_copy)]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(
    "text", ["[]", '{"format": 99, "baselines": {}}', '{"format": 1, "baselines": {"a": {"version": 1}}}']
)
def test_read_lock_refuses_wrong_shapes(tmp_path: Path, text: str) -> None:
    path = tmp_path / "sparkbase.lock"
    path.write_text(text)
    with pytest.raises(LockFileError):
        read_lock(path)


def test_check_lock_kinds() -> None:
    recorded = {
        "same": LockEntry("1.0.0", "a"),
        "unbumped": LockEntry("1.0.0", "a"),
        "bumped": LockEntry("1.0.0", "a"),
        "gone": LockEntry("1.0.0", "a"),
    }
    current = {
        "same": LockEntry("1.0.0", "a"),
        "unbumped": LockEntry("1.0.0", "b"),
        "bumped": LockEntry("1.1.0", "c"),
        "new": LockEntry("1.0.0", "d"),
    }
    kinds = {issue.baseline: issue.kind for issue in check_lock(recorded, current)}
    assert kinds == {
        "unbumped": IssueKind.UNBUMPED,
        "bumped": IssueKind.STALE,
        "new": IssueKind.MISSING,
        "gone": IssueKind.REMOVED,
    }
