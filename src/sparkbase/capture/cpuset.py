"""The cpuset section from a live node: the serving slice's CPUs."""

from __future__ import annotations

from sparkbase.capture.core import Collector
from sparkbase.facts.model import NodeFacts
from sparkbase.model.baseline import Baseline
from sparkbase.model.cpuset import CpusetSpec


def capture(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """The CPUs the serving slice allows."""
    cpus = facts.slice_allowed_cpus
    out.put(("cpuset", "cpus"), _cpulist(cpus) if cpus else None,
            f"{baseline.cpuset.slice} has no AllowedCPUs")


def _cpulist(cpus: frozenset[int]) -> str:
    return CpusetSpec(cpus=sorted(cpus)).cpulist()
