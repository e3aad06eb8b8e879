"""Release records: written whole or not at all, never rewritten, read back with their
completions; what differs between two shapes is named; the lane's settings leave out how it
is found and watched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sparkbase.gate import records
from sparkbase.gate.records import (
    Completion,
    NewRelease,
    RecordError,
    Shape,
    lane_settings,
    list_releases,
    write_release,
)
from sparkbase.model.lanes import Lane

LANE = """\
model: m
engine: sglang
baseline: site-stock-6.17-4k
baseline_version: 1.2.0
shape: ring4
nodes: [spark1, spark2, spark3, spark4]
runtime:
  unit: lane-x.service
  match: [sglang.launch_server]
  metrics: {port: 30000}
"""
SHAPE = Shape("site-stock-6.17-4k", "1.2.0", "f54ed9d402d9" + "0" * 52, None,
              {"model": "m", "runtime": {"unit": "lane-x.service"}})


def new(tmp_path: Path, name: str = "r1", when: str = "2026-10-27T10:00:00+00:00") -> NewRelease:
    lane_file = tmp_path / "lanes" / "x.yaml"
    lane_file.parent.mkdir(exist_ok=True)
    lane_file.write_text(LANE)
    completions = {"p1": Completion("p1", "Paris.", (1, 2, 3)), "p2": Completion("p2", "ab")}
    return NewRelease("x", name, lane_file, SHAPE, {"name": "sparkbase-v1", "digest": "sha256:00"},
                      completions, {"against": None, "verdict": None}, "ops@mgmt", when)


def test_a_release_is_written_whole_and_read_back(tmp_path: Path) -> None:
    path = write_release(tmp_path, new(tmp_path))
    assert path == tmp_path / "releases" / "x" / "r1"
    assert sorted(p.name for p in path.iterdir()) == ["completions.json", "lane.yaml", "release.json"]
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".new")] == []  # no staging left
    (release,) = list_releases(tmp_path, "x")
    assert (release.name, release.who, release.shape) == ("r1", "ops@mgmt", SHAPE)
    assert release.completions() == {"p1": Completion("p1", "Paris.", (1, 2, 3)),
                                     "p2": Completion("p2", "ab")}
    assert release.completion_hashes["p1"] == Completion("p1", "", (1, 2, 3)).digest()
    assert (path / "lane.yaml").read_text() == LANE
    record = json.loads((path / "release.json").read_text())
    assert record["format"] == 1 and record["image_digest"] is None
    assert oct(os.stat(path).st_mode & 0o777) == "0o755"


def test_a_release_is_never_rewritten(tmp_path: Path) -> None:
    write_release(tmp_path, new(tmp_path))
    before = (tmp_path / "releases/x/r1/release.json").read_bytes()
    with pytest.raises(RecordError, match="r1 exists; a release is never rewritten"):
        write_release(tmp_path, new(tmp_path, when="2026-10-28T10:00:00+00:00"))
    assert (tmp_path / "releases/x/r1/release.json").read_bytes() == before


def test_a_bad_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="use letters, digits"):
        write_release(tmp_path, new(tmp_path, name="../r1"))


def test_releases_are_listed_by_time_and_the_next_name_counts_up(tmp_path: Path) -> None:
    write_release(tmp_path, new(tmp_path, "r2", "2026-10-28T00:00:00+00:00"))
    write_release(tmp_path, new(tmp_path, "first", "2026-10-27T00:00:00+00:00"))
    assert [r.name for r in list_releases(tmp_path, "x")] == ["first", "r2"]
    assert records.next_name(tmp_path, "x") == "r3" and records.next_name(tmp_path, "y") == "r1"


def test_a_directory_that_is_no_record_is_named(tmp_path: Path) -> None:
    write_release(tmp_path, new(tmp_path))
    (tmp_path / "releases/x/r1/release.json").write_text('{"format": 1, "lane": "x"}')
    with pytest.raises(RecordError, match=r"r1/release.json: not a release record \(KeyError"):
        list_releases(tmp_path, "x")
    (tmp_path / "releases/x/r1/release.json").unlink()
    with pytest.raises(RecordError, match=r"release\.json"):
        list_releases(tmp_path, "x")


def test_what_differs_is_named_field_by_field() -> None:
    now = Shape("site-stock-6.17-4k", "1.3.0", "aa" * 32, "sha256:" + "b" * 64,
                {"model": "m", "runtime": {"unit": "lane-x-next.service"}})
    lines = now.differences(SHAPE, "r1")
    assert lines == [
        "baseline render hash aaaaaaaaaaaa… (site-stock-6.17-4k 1.3.0); "
        "r1: f54ed9d402d9… (site-stock-6.17-4k 1.2.0)",
        f"image digest sha256:{'b' * 64}; r1: none (no container)",
        'lane setting runtime.unit: "lane-x-next.service"; r1: "lane-x.service"',
    ]
    assert SHAPE.differences(SHAPE, "r1") == []


def test_settings_leave_out_how_the_lane_is_found_and_watched() -> None:
    from ruamel.yaml import YAML

    data = YAML(typ="safe").load(LANE)
    settings = lane_settings(Lane.model_validate(data))
    data["description"] = "other words"
    data["runtime"]["match"] = ["other"]
    data["runtime"]["metrics"] = {"port": 8000, "nodes": ["spark1"]}
    assert lane_settings(Lane.model_validate(data)) == settings
    data["runtime"]["unit"] = "lane-y.service"
    assert lane_settings(Lane.model_validate(data)) != settings
    assert "match" not in settings["runtime"] and settings["runtime"]["unit"] == "lane-x.service"


def test_the_image_digest_is_the_lane_files_pinned_one() -> None:
    from ruamel.yaml import YAML

    data = YAML(typ="safe").load(LANE)
    assert records.image_digest(Lane.model_validate(data)) is None
    data["runtime"]["container"] = {"name": "dsv41-flash",
                                    "image": "aidendle94/sparkrun-sglang-dsv41-gb10@sha256:" + "f617afd8" * 8}
    assert records.image_digest(Lane.model_validate(data)) == "sha256:" + "f617afd8" * 8
