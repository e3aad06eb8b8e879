"""Serving lanes: what a launch needs from the hosts it runs on, and how to find it running."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sparkbase.model.images import pinned_reference
from sparkbase.model.shapes import ShapeName
from sparkbase.model.types import Name, SemVer, StrictModel, SystemdUnit


def _pinned(text: str) -> str:
    pinned_reference(text)  # ValueError saying what is missing
    return text

#: a fixed string looked for in a process's command line: printable, no quotes or shell
#: characters (it is passed to `grep -F` as one quoted word, and shown in findings)
CommandText = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:=+@-]{0,119}$")]
#: an HTTP path on the metrics port
MetricsPath = Annotated[str, StringConstraints(pattern=r"^/[A-Za-z0-9._/-]{0,99}$")]
#: an image reference pinned by digest: `REPOSITORY[:TAG]@sha256:<64 hex>`
ImageRef = Annotated[str, StringConstraints(max_length=512), AfterValidator(_pinned)]


class ContainerRuntime(StrictModel):
    """The lane runs as a Docker container: its name, and the image it must run, pinned by
    digest (the digest is what a launch must match: upgrades arrive as new images)."""

    name: Name = Field(description="the container's name (`docker ps` NAMES, without the leading '/')")
    image: ImageRef = Field(
        description="the image the container must run, pinned by digest: REPOSITORY[:TAG]@sha256:<64 hex> "
        "(the container passes when its image's RepoDigests hold REPOSITORY@DIGEST, or it was "
        "created from that reference)"
    )

    def digest(self) -> str:
        """The pinned digest, `sha256:<64 hex>`."""
        digest = pinned_reference(self.image).digest
        assert digest is not None
        return digest


class LaneEndpoint(StrictModel):
    """Where the lane answers: its OpenAI-compatible API on one node (`http://ADDRESS:port/v1`,
    ADDRESS the node's management address)."""

    node: Name = Field(description="the lane's node whose API server answers (the head node)")
    port: int = Field(ge=1, le=65535, description="TCP port of the API server")
    api: Literal["openai"] = Field(default="openai", description="the API it speaks (OpenAI-compatible)")


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
    """How the lane runs on each node, and how to find its serving processes in the host's /proc.

    A process serves the lane when every `match` string occurs in its command line
    (arguments joined by spaces); that works the same for a systemd unit and for a
    container, whose processes the host's /proc shows too. How it runs (a container, a
    unit, or a unit that starts the container) is how a drain stops it.
    """

    unit: SystemdUnit | None = Field(
        default=None, description="systemd unit that starts the lane on each node (stopped first to drain it)"
    )
    container: ContainerRuntime | None = Field(
        default=None, description="the Docker container the lane runs as on each node (its name and pinned "
        "image; `docker stop NAME` drains it)"
    )
    match: list[CommandText] = Field(
        min_length=1,
        max_length=4,
        description="fixed strings that all occur in a serving process's command line "
        "(the first is searched for on the node, the rest narrow it down)",
    )
    endpoint: LaneEndpoint | None = Field(
        default=None, description="where the lane's OpenAI-compatible API answers"
    )
    metrics: MetricsEndpoint | None = Field(default=None, description="the engine's metrics endpoint")

    @model_validator(mode="after")
    def _runs_somehow(self) -> LaneRuntime:
        """A lane says how it runs: a unit, a container, or both."""
        if self.unit is None and self.container is None:
            raise ValueError("say how the lane runs: unit (the systemd unit that starts it) or "
                             "container ({name, image}: the Docker container it runs as), or both")
        return self


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
    def _runtime_nodes_are_the_lanes(
        cls, runtime: LaneRuntime | None, info: ValidationInfo
    ) -> LaneRuntime | None:
        """`runtime.metrics.nodes` names only the lane's own nodes, each once, and
        `runtime.endpoint.node` is one of them (when `nodes` itself is valid: its own error
        is reported otherwise)."""
        lane_nodes = info.data.get("nodes")
        if runtime is None or lane_nodes is None:
            return runtime
        if runtime.endpoint is not None and runtime.endpoint.node not in lane_nodes:
            raise ValueError(f"runtime.endpoint.node: {runtime.endpoint.node} is not among the lane's nodes "
                             f"({', '.join(lane_nodes)})")
        named = runtime.metrics.nodes if runtime.metrics is not None else None
        if not named:
            return runtime
        strangers = [node for node in named if node not in lane_nodes]
        if strangers:
            raise ValueError(f"runtime.metrics.nodes: {', '.join(strangers)} not among the lane's nodes "
                             f"({', '.join(lane_nodes)})")
        if len(set(named)) != len(named):
            raise ValueError("runtime.metrics.nodes: a node is named twice")
        return runtime
