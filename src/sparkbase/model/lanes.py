"""Serving lanes: what a launch needs from the hosts it runs on, and how to find it running."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, ValidationInfo, field_validator

from sparkbase.model.baseline import ShapeName
from sparkbase.model.types import Name, SemVer, StrictModel, SystemdUnit

#: a fixed string looked for in a process's command line: printable, no quotes or shell
#: characters (it is passed to `grep -F` as one quoted word, and shown in findings)
CommandText = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:=+@-]{0,119}$")]
#: an HTTP path on the metrics port
MetricsPath = Annotated[str, StringConstraints(pattern=r"^/[A-Za-z0-9._/-]{0,99}$")]


class MetricsEndpoint(StrictModel):
    """Where each node's serving process exports Prometheus metrics (`http://NODE:port/path`)."""

    port: int = Field(ge=1, le=65535, description="TCP port of the engine's metrics endpoint")
    path: MetricsPath = Field(default="/metrics", description="HTTP path of the metrics endpoint")
    nodes: list[Name] | None = Field(
        default=None,
        min_length=1,
        description="the lane's nodes that serve the endpoint (default: every node of the lane); "
        "an engine whose API server runs on its head node only names that node",
    )


class LaneRuntime(StrictModel):
    """How to find the lane's serving processes on each node, read from the host's /proc.

    A process serves the lane when every `match` string occurs in its command line
    (arguments joined by spaces); that works the same for a systemd unit and for a
    container, whose processes the host's /proc shows too.
    """

    unit: SystemdUnit | None = Field(
        default=None, description="systemd unit that starts the lane on each node (stopped to drain it)"
    )
    container: Name | None = Field(
        default=None, description="container name, when the unit runs the engine in a container"
    )
    match: list[CommandText] = Field(
        min_length=1,
        max_length=4,
        description="fixed strings that all occur in a serving process's command line "
        "(the first is searched for on the node, the rest narrow it down)",
    )
    metrics: MetricsEndpoint | None = Field(default=None, description="the engine's metrics endpoint")


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
    runtime: LaneRuntime | None = Field(
        default=None, description="how to find the lane's serving processes (none: no runtime checks)"
    )

    @field_validator("runtime")
    @classmethod
    def _metrics_nodes_are_the_lanes(
        cls, runtime: LaneRuntime | None, info: ValidationInfo
    ) -> LaneRuntime | None:
        """`runtime.metrics.nodes` names only the lane's own nodes, each once (when `nodes`
        itself is valid: its own error is reported otherwise)."""
        named = runtime.metrics.nodes if runtime is not None and runtime.metrics is not None else None
        lane_nodes = info.data.get("nodes")
        if not named or lane_nodes is None:
            return runtime
        strangers = [node for node in named if node not in lane_nodes]
        if strangers:
            raise ValueError(f"runtime.metrics.nodes: {', '.join(strangers)} not among the lane's nodes "
                             f"({', '.join(lane_nodes)})")
        if len(set(named)) != len(named):
            raise ValueError("runtime.metrics.nodes: a node is named twice")
        return runtime
