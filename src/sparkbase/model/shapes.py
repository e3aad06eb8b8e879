"""The serving shapes a baseline is qualified for, and the transports they use."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sparkbase.model.types import StrictModel

ShapeName = Literal["ring4", "triangle3"]
#: nccl-ring: NCCL's ring; oneshot-ring4 / oneshot-direct: the variant's one-shot transports for
#: the four-node ring and the three-node triangle (spark-ds41f config/cluster-tp4.json,
#: config/cluster-64k.json)
Transport = Literal["nccl-ring", "oneshot-ring4", "oneshot-direct"]

#: how many nodes each shape spans
SHAPE_NODES: dict[str, int] = {"ring4": 4, "triangle3": 3}
#: the one-shot transports and the only shape each runs on
ONESHOT_SHAPES: dict[str, str] = {"oneshot-ring4": "ring4", "oneshot-direct": "triangle3"}


class Shape(StrictModel):
    """A serving shape the baseline is qualified for, and the transport it uses."""

    name: ShapeName = Field(description="ring4 (four nodes) or triangle3 (three nodes)")
    transport: Transport = Field(description="collective transport serving uses on this shape")
