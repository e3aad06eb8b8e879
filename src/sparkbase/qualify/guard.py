"""The contamination guard: no request but the gate's own may run on the lane while it measures.

The site once threw a benchmark away because agents used the lane during it. The guard reads
the lane's own metrics, through the reader the re-open triggers use (`gate.lane_metrics`:
every node of `runtime.metrics`, bounded scrapes), before each run, between every two of its
requests and after it. The gate sends one request at a time and reads only between them, so
any running request it sees is someone else's: "other traffic on spark1: 2 running requests".
A node that cannot be read is no better: the run cannot be shown clean. Either way the run
is invalid and gives no verdict.

Running requests are the gauges the session-load trigger reads (`sglang:num_running_reqs`,
`vllm:num_requests_running`, from the site's trigger when it has one), counted as the
trigger counts them: SGLang once per scheduler group (a TP group over several nodes is one
batch, `gate.triggers.sglang_group_values`), vLLM per engine. An engine refreshes these
gauges when it logs its batch (SGLang's scheduler on a decode-log interval, vLLM per engine
step), so a reading just after the gate's own request may still show it: a nonzero reading is
read again `SETTLE_READS` times, `SETTLE_SECONDS` apart, and only one that stays is traffic.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkbase.gate.lane_metrics import NodeScrape, lane_targets, scrape_all
from sparkbase.gate.metrics import Sample
from sparkbase.gate.triggers import key_label, sglang_group_values
from sparkbase.model.site import Site
from sparkbase.transport import ssh_targets

#: the engines' running-requests gauges when the site has no session-load trigger naming them
#: (SGLang python/sglang/srt/metrics/collector.py, vLLM vllm/v1/metrics/loggers.py)
DEFAULT_RUNNING = {"sglang": "sglang:num_running_reqs", "vllm": "vllm:num_requests_running"}
#: how often, and how far apart, a nonzero reading is read again before it counts
SETTLE_READS = 3
SETTLE_SECONDS = 1.0


@dataclass(frozen=True)
class Contamination:
    """Why a run cannot count: another request on the lane, or a node that could not be read."""

    message: str


def running_metric(site: Site, engine: str) -> str:
    """The running-requests gauge of `engine` the site's session-load trigger reads, else the
    engine's own name for it."""
    for trigger in site.rules.triggers:
        if trigger.kind == "session-load":
            names = getattr(trigger, engine, None)
            running = getattr(names, "running", None)
            if isinstance(running, str):
                return running
    return DEFAULT_RUNNING[engine]


def running_by_node(scrapes: list[NodeScrape], engine: str, metric: str) -> dict[str, float]:
    """Running requests per node at its scrape (SGLang once per scheduler group)."""
    found = {scrape.node: 0.0 for scrape in scrapes if scrape.scraped}
    samples: list[Sample] = [s for scrape in scrapes if scrape.scraped for s in scrape.samples]
    if engine == "sglang":
        for (_when, key), value in sglang_group_values(samples, metric).items():
            node = key_label(key, "instance")
            if node in found:
                found[node] += value
    else:
        for sample in samples:
            if sample.metric == metric and sample.labels.get("instance") in found:
                found[sample.labels["instance"]] += sample.value
    return found


def judge(scrapes: list[NodeScrape], engine: str, metric: str) -> Contamination | None:
    """Contamination in one reading of every node, or None when every node reads zero."""
    for scrape in scrapes:
        if not scrape.scraped:
            return Contamination(f"cannot read the running requests on {scrape.node}: {scrape.error}")
    busy = [(node, count) for node, count in running_by_node(scrapes, engine, metric).items() if count > 0]
    if not busy:
        return None
    parts = [f"{node}: {count:g} running request{'' if count == 1 else 's'}" for node, count in busy]
    return Contamination("other traffic on " + "; ".join(parts))


class TrafficGuard:
    """Reads the lane's running requests; `check(when)` returns the contamination or None."""

    def __init__(self, read: Callable[[], list[NodeScrape]], engine: str, metric: str,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._read = read
        self.engine = engine
        self.metric = metric
        self._sleep = sleep

    def check(self, when: str) -> Contamination | None:
        """One reading (re-read while it shows requests, see the module text), said with `when`."""
        found = judge(self._read(), self.engine, self.metric)
        for _ in range(SETTLE_READS):
            if found is None or found.message.startswith("cannot read"):
                break
            self._sleep(SETTLE_SECONDS)
            found = judge(self._read(), self.engine, self.metric)
        return Contamination(f"{found.message} ({when})") if found is not None else None


def lane_guard(site: Site, lane_name: str, lab: Path | None) -> TrafficGuard:
    """The guard of `lane_name`: its metrics endpoints (the lab's with `lab`), its engine's gauge.
    `LaneMetricsError` when the lane names no metrics endpoint."""
    engine = site.lanes[lane_name].engine
    metric = running_metric(site, engine)
    targets = lane_targets(site, lane_name, ssh_targets(site, lab), lab is not None)

    def read() -> list[NodeScrape]:
        return scrape_all(targets, {metric}, time.time())

    return TrafficGuard(read, engine, metric)
