"""The lab's lane stand-in: its unit, the slice path it fakes, its metrics (pure parts)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sparkbase.facts.parsers.runtime import nccl_file_version
from sparkbase.model.site import load_site
from sparkbase_lab.lanes import IMAGE_NCCL, engine_args, unit_text
from sparkbase_lab.shims.cmd_serving import IMAGE_LIB, _slice_path, metrics_text


@pytest.mark.parametrize(("slice_unit", "path"), [
    ("sparkbase-serving.slice", "/sparkbase.slice/sparkbase-serving.slice"),
    ("serving.slice", "/serving.slice"),
    ("a-b-c.slice", "/a.slice/a-b.slice/a-b-c.slice"),
])
def test_slice_path_is_systemds(slice_unit: str, path: str) -> None:
    assert _slice_path(slice_unit) == path


def test_unit_runs_the_engine_command_line_in_the_slice(tmp_path: Path,
                                                         make_site: Callable[[Path], Path]) -> None:
    site = load_site(make_site(tmp_path / "site"))
    text = unit_text(site, "dsv41-flash", 7601)
    assert "X-SparkbaseLab=serving" in text.splitlines()
    assert "__serve__ -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4.1-Flash-1017" in text
    assert "Slice=sparkbase-serving.slice" in text
    assert "SPARKBASE_LAB_METRICS_PORT=7601" in text
    runtime = site.lanes["dsv41-flash"].runtime
    assert runtime is not None and all(s in text for s in runtime.match)
    glm = site.lanes["glm-fp8"]
    assert glm.runtime is not None
    assert all(s in " ".join(engine_args(glm.engine, glm.model)) for s in glm.runtime.match)


def test_a_lane_whose_nccl_is_in_its_image_maps_the_images_library(
        tmp_path: Path, make_site: Callable[[Path], Path]) -> None:
    """The variant's lane maps the NCCL its image carries (a stand-in named as NCCL's build
    names it), the site's lanes the site's host library."""
    site = load_site(make_site(tmp_path / "site"))
    assert f"SPARKBASE_LAB_NCCL={IMAGE_NCCL} " in unit_text(site, "ds41f-ring4", 7601)
    assert "SPARKBASE_LAB_NCCL=/opt/nccl-site/lib/libnccl.so.2.27.7 " in unit_text(site, "dsv41-flash", 7601)
    assert nccl_file_version(IMAGE_NCCL) == site.baselines["ds41f-7x-64k"].nccl.library.version
    assert IMAGE_NCCL.startswith(IMAGE_LIB)  # the serving shim writes the stand-in there


def test_metrics_are_the_engines_gauges() -> None:
    assert "sglang:num_running_reqs 0.0" in metrics_text("sglang")
    assert "vllm:num_requests_running 0.0" in metrics_text("vllm")
