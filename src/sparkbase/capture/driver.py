"""The driver section from a live node: the driver version nvidia-smi reports and its package."""

from __future__ import annotations

from sparkbase.capture.core import Collector
from sparkbase.facts.model import NodeFacts
from sparkbase.model.baseline import Baseline


def capture(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """The driver's version and the Debian version of its nvidia-utils package."""
    utils = f"nvidia-utils-{baseline.driver.branch.split('-')[0]}"
    out.put(("driver", "version"), facts.gpu.driver_version, f"nvidia-smi: {facts.gpu.error or 'no answer'}")
    out.put(("driver", "package_version"), facts.packages.get(utils), f"{utils} is not installed")
