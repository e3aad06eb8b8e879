"""Serving lanes: what a launch needs from the hosts it runs on."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sparkbase.model.baseline import ShapeName
from sparkbase.model.types import Name, SemVer, StrictModel


class Lane(StrictModel):
    """`lanes/NAME.yaml`: one serving lane and the host baseline it was qualified on."""

    description: str = Field(default="", max_length=500, description="what the lane serves")
    model: str = Field(max_length=200, description="model checkpoint the lane serves")
    engine: Literal["sglang", "vllm"] = Field(description="serving engine")
    baseline: Name = Field(description="baseline the lane was qualified on")
    baseline_version: SemVer = Field(description="version of that baseline")
    shape: ShapeName = Field(description="shape the lane runs on")
    nodes: list[Name] = Field(min_length=1, description="nodes the lane runs on, in rank order")
    enabled: bool = Field(
        default=True,
        description="false for a lane the site evaluated and rejected (preflight always refuses it)",
    )
