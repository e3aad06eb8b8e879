"""The site contract every assigned baseline must satisfy, and the re-open triggers.

Both come from `baselines/site.yaml`. The contract is what makes lane switching cheap
(one kernel line, one page size, one NCCL library and merge setting, one netplan shape);
the triggers are the written conditions under which a rejected baseline is looked at again.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from sparkbase.model.provenance import Source
from sparkbase.model.shapes import Transport
from sparkbase.model.types import Name, PackageVersion, PageSize, StrictModel, ZeroOrOne


def _default_transports() -> list[Transport]:
    return ["nccl-ring"]


class SiteContract(StrictModel):
    """Invariants of the site: a node's baseline that breaks one is refused."""

    kernel_line: str = Field(
        pattern=r"^[0-9]+\.[0-9]+$", description="kernel release line every node runs, e.g. 6.17"
    )
    page_size: PageSize = Field(description="page size every node runs")
    nccl_ib_merge_nics: ZeroOrOne = Field(description="NCCL_IB_MERGE_NICS every node sets")
    shared_nccl_library: bool = Field(
        default=True, description="every node loads the same NCCL library (path and sha256)"
    )
    shared_netplan_shape: bool = Field(
        default=True, description="every node has the same fabric netplan shape (ports, MTU)"
    )
    memory_saver_allowed: bool = Field(
        default=False, description="a memory-saver DKMS module may be required"
    )
    display_carveout_allowed: bool = Field(
        default=False, description="the GB10 display carve-out may be used"
    )
    transports: list[Transport] = Field(
        default_factory=_default_transports,
        description="collective transports serving may use",
    )


class KernelPinTrigger(StrictModel):
    """Fires when the site's kernel/driver pin moves: the contract's kernel line and page
    size become the trigger's, or the driver the site's nodes are pinned to is no longer the
    one the decision was taken on."""

    id: Name = Field(description="short identifier")
    kind: Literal["kernel-pin"] = Field(description="trigger kind")
    description: str = Field(max_length=500, description="the condition, in the site's words")
    reopens: str = Field(max_length=500, description="the decision it re-opens")
    kernel_line_prefix: str = Field(
        pattern=r"^[0-9]+\.$|^[0-9]+\.[0-9]+$", description="e.g. '7.' for the 7.x line"
    )
    page_size: PageSize = Field(description="page size of the new pin")
    driver_pin: PackageVersion | None = Field(
        default=None,
        description="the driver version the re-opened decision was taken on (the baselines' "
        "driver.version then); the trigger also fires when the baselines of the inventory's "
        "nodes pin any other driver. A site that confirms a placeholder driver re-judges and "
        "sets it here",
    )


MetricName = Annotated[
    str, Field(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$", max_length=200, description="Prometheus metric name")
]


class SglangSessionMetrics(StrictModel):
    """The SGLang scheduler gauges a session-load trigger reads (once per scheduler group:
    the lowest TP/PP rank of each; every DP rank is a group of its own)."""

    running: MetricName = Field(description="gauge: requests in the running batch")
    kv_tokens_used: MetricName = Field(description="gauge: KV-cache tokens in use")
    source: str = Field(max_length=300, description="where the names are defined (repository, file, commit)")


class VllmSessionMetrics(StrictModel):
    """The vLLM engine gauges a session-load trigger reads (one series per engine index)."""

    running: MetricName = Field(description="gauge: requests running")
    kv_usage_fraction: MetricName = Field(description="gauge: fraction of KV-cache blocks in use (0-1)")
    cache_info: MetricName = Field(
        description="info gauge whose label kv_cache_size_tokens (else num_gpu_blocks x block_size) "
        "sizes the KV cache in tokens"
    )
    source: str = Field(max_length=300, description="where the names are defined (repository, file, commit)")


#: the thresholds of a session-load trigger that carry a source
SessionLoadField = Literal["min_context_tokens", "more_than", "window_minutes", "sustained_fraction"]


class SessionLoadTrigger(StrictModel):
    """Fires when long-context sessions run concurrently above a threshold, sustained.

    No engine exports a request's context length, so a sample time counts, per engine
    instance, min(running requests, floor(KV tokens in use / min_context_tokens)) sessions:
    the most sessions of that size the instance could be holding at once.
    """

    id: Name = Field(description="short identifier")
    kind: Literal["session-load"] = Field(description="trigger kind")
    description: str = Field(max_length=500, description="the condition, in the site's words")
    reopens: str = Field(max_length=500, description="the decision it re-opens")
    definition: str = Field(
        max_length=1000, description="what counts as one long session, from the metrics engines export"
    )
    sglang: SglangSessionMetrics = Field(description="SGLang's metric names (the DeepSeek lane)")
    vllm: VllmSessionMetrics = Field(description="vLLM's metric names (the GLM lanes)")
    min_context_tokens: int = Field(
        ge=1, le=100_000_000, description="a session counts from this many tokens"
    )
    more_than: int = Field(ge=0, le=100_000, description="fires when more than this many run at once")
    window_minutes: int = Field(
        ge=1, le=10_080, description="window the load is judged over (at most a week)"
    )
    sustained_fraction: float = Field(
        gt=0, le=1, description="fraction of samples in the window that must exceed the threshold"
    )
    sources: dict[SessionLoadField, Source] = Field(
        default_factory=dict,
        description="where each threshold comes from (seed, site, placeholder: what the site must "
        "confirm); the window and the fraction are the site's to decide",
    )

    def metric_names(self) -> set[str]:
        """Every metric this trigger reads (the scrape keeps only these)."""
        return {
            self.sglang.running,
            self.sglang.kv_tokens_used,
            self.vllm.running,
            self.vllm.kv_usage_fraction,
            self.vllm.cache_info,
        }


Trigger = Annotated[KernelPinTrigger | SessionLoadTrigger, Field(discriminator="kind")]


#: an environment variable name as a `.env` line starts with it
EnvKey = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$", description="variable name")]
#: a file on the operator machine: absolute, or relative to the site directory
OperatorPath = Annotated[str, Field(pattern=r"^[A-Za-z0-9/_.+~-]{1,255}$", description="file path")]


class ProxySpec(StrictModel):
    """The model-name proxy: the one `.env` line that says which lane serves.

    `sparkbase lane switch` rewrites that line (`KEY=LANE`), nothing else in the file.
    """

    env_file: OperatorPath = Field(
        description="the proxy's .env on the operator machine (relative: to the site directory)"
    )
    key: EnvKey = Field(description="the variable whose value is the active lane's name")


class SiteRules(StrictModel):
    """`baselines/site.yaml`: the site contract, the re-open triggers and the lane proxy."""

    site: Name = Field(description="site name")
    contract: SiteContract = Field(description="what every node's baseline must satisfy")
    triggers: list[Trigger] = Field(default_factory=list, max_length=100, description="re-open triggers")
    proxy: ProxySpec | None = Field(
        default=None, description="the model-name proxy's .env line that selects the serving lane"
    )
