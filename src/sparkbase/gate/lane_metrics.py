"""A running lane's own metrics: which endpoints the site names, their scrapes, key figures.

A lane's `runtime.metrics` (lanes/NAME.yaml) names the port and path each of its nodes
serves Prometheus metrics on. The host is the node's SSH address (its inventory alias
resolved through the site's ssh_config, as SSH itself resolves it); in the lab it is the
lab's loopback address and the stand-in's port (the node's SSH port +
`transport.targets.LAB_METRICS_PORT_OFFSET`), and nothing outside 127.0.0.0/8 is ever
contacted. Every scrape goes through
`sparkbase.gate.metrics` (16 MiB cap, 10 s deadline, strict parser); a node that cannot be
scraped is reported with why, never skipped silently.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbase.gate.metrics import MetricsError, Sample, load_metrics, parse_scrapes
from sparkbase.gate.triggers import sglang_loads, vllm_loads
from sparkbase.transport import ssh_targets
from sparkbase.transport.targets import LAB_METRICS_PORT_OFFSET as METRICS_PORT_OFFSET

if TYPE_CHECKING:
    from sparkbase.model.site import Site
    from sparkbase.model.site_rules import SessionLoadTrigger
    from sparkbase.transport.client import Endpoint
    from sparkbase.transport.targets import SshTarget

#: the label a node's samples carry (as Prometheus labels a scrape target's samples)
INSTANCE_LABEL = "instance"
#: where a sample's own `instance` label goes (Prometheus' honor_labels: false)
EXPORTED_INSTANCE_LABEL = "exported_instance"


class LaneMetricsError(Exception):
    """The lane's endpoints cannot be named (no `runtime.metrics`, an unresolvable node)."""


@dataclass(frozen=True)
class MetricsTarget:
    """One node's metrics endpoint, or why it has none (then `url` is empty)."""

    node: str
    url: str
    refused: str = ""


@dataclass(frozen=True)
class NodeScrape:
    """One node's scrape: its samples (labelled with the node), or why there are none."""

    node: str
    url: str
    samples: tuple[Sample, ...] = ()
    error: str = ""

    @property
    def scraped(self) -> bool:
        """The endpoint answered with a usable scrape."""
        return not self.error


def endpoint_url(host: str, port: int, path: str) -> str:
    """`http://HOST:PORT/PATH`, an IPv6 address in brackets."""
    shown_host = f"[{host}]" if ":" in host else host
    return f"http://{shown_host}:{port}{path}"


def is_loopback(host: str) -> bool:
    """`host` is an IPv4 loopback address (127.0.0.0/8); a name is not."""
    try:
        return ipaddress.IPv4Address(host) in ipaddress.IPv4Network("127.0.0.0/8")
    except ValueError:
        return False


def lane_targets(
    site: Site,
    lane_name: str,
    targets: dict[str, SshTarget],
    lab: bool,
    resolve: Callable[[SshTarget], Endpoint] | None = None,
) -> list[MetricsTarget]:
    """The metrics endpoint of each of the lane's nodes that serve one (`runtime.metrics.nodes`,
    default all), in that order.

    Real fleet: the node's SSH HostName and the lane's port. Lab (`lab`): the node's lab
    address and the stand-in's port (its SSH port + the lab's offset), and only loopback.
    `LaneMetricsError` when the lane names no endpoint.
    """
    lane = site.lanes[lane_name]
    endpoint = lane.runtime.metrics if lane.runtime is not None else None
    if endpoint is None:
        raise LaneMetricsError(f"lane {lane_name} names no metrics endpoint (lanes/{lane_name}.yaml "
                               "runtime.metrics: {port, path})")
    if resolve is None:
        # kept here: transport.client imports paramiko (0.3 s), which reading metrics does not need
        from sparkbase.transport.client import resolve as ssh_resolve

        resolve = ssh_resolve
    found: list[MetricsTarget] = []
    for node in endpoint.nodes or lane.nodes:
        target = targets.get(node)
        if target is None:
            found.append(MetricsTarget(node, "", "not in the inventory"))
            continue
        try:
            address = resolve(target)
        except Exception as exc:  # an unreadable ssh_config is this node's reason, not a crash
            found.append(MetricsTarget(node, "", f"cannot resolve {target.alias}: {type(exc).__name__}"))
            continue
        if lab and not is_loopback(address.hostname):
            why = f"lab address {address.hostname} is not loopback; not asked"
            found.append(MetricsTarget(node, "", why))
            continue
        port = address.port + METRICS_PORT_OFFSET if lab else endpoint.port
        found.append(MetricsTarget(node, endpoint_url(address.hostname, port, endpoint.path)))
    return found


def labelled(samples: list[Sample], node: str) -> list[Sample]:
    """`samples` with `instance=NODE` (a sample's own `instance` kept as `exported_instance`),
    so two nodes exporting the same series are two engine instances, not one."""
    result: list[Sample] = []
    for sample in samples:
        labels = dict(sample.labels)
        if INSTANCE_LABEL in labels:
            labels[EXPORTED_INSTANCE_LABEL] = labels.pop(INSTANCE_LABEL)
        labels[INSTANCE_LABEL] = node
        result.append(replace(sample, labels=labels))
    return result


def scrape_one(target: MetricsTarget, wanted: Collection[str], scraped_at: float,
               fetch: Callable[[str], str] = load_metrics) -> NodeScrape:
    """The node's scrape through `sparkbase.gate.metrics` (bounded, strict), or why not."""
    if not target.url:
        return NodeScrape(target.node, "", error=target.refused)
    try:
        samples = parse_scrapes(fetch(target.url), scraped_at, target.url, wanted)
    except MetricsError as exc:  # said after the URL: the message's own leading URL goes
        return NodeScrape(target.node, target.url, error=str(exc).removeprefix(f"{target.url}: "))
    return NodeScrape(target.node, target.url, tuple(labelled(samples, target.node)))


def scrape_all(targets: list[MetricsTarget], wanted: Collection[str], scraped_at: float,
               fetch: Callable[[str], str] = load_metrics) -> list[NodeScrape]:
    """Every node's scrape at once (each within the metrics deadline), in `targets`' order."""
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(targets)), thread_name_prefix="lane-metrics") as pool:
        return list(pool.map(lambda t: scrape_one(t, wanted, scraped_at, fetch), targets))


def wanted_metrics(site: Site) -> set[str]:
    """Every metric the site's session-load triggers read."""
    wanted: set[str] = set()
    for trigger in site.rules.triggers:
        if trigger.kind == "session-load":
            wanted |= trigger.metric_names()
    return wanted


def key_figures(trigger: SessionLoadTrigger, samples: list[Sample]) -> str:
    """One node's figures as the trigger reads them, at its latest scrape: running requests,
    KV-cache tokens in use and long sessions, per engine instance."""
    loads = sglang_loads(trigger, samples) + vllm_loads(trigger, samples)
    if not loads:
        return f"no {trigger.sglang.running} or {trigger.vllm.running} in the scrape"
    latest = max(when for when, _ in loads)
    parts: list[str] = []
    for _when, load in (item for item in loads if item[0] == latest):
        kv = "unknown" if load.kv_tokens is None else f"{load.kv_tokens:,.0f}"
        sessions = load.long_sessions(trigger.min_context_tokens)
        long_text = "unknown" if sessions is None else str(sessions)
        parts.append(f"{load.engine}: running requests {load.running:g}, KV-cache tokens in use {kv}, "
                     f"sessions of ≥{trigger.min_context_tokens} tokens {long_text}")
    return "; ".join(parts)


def source_lines(lane_name: str, env: Path, scrapes: list[NodeScrape]) -> list[str]:
    """Which source a trigger read: the lane, where it was found, each endpoint and its fate."""
    lines = [f"metrics source: the active lane {lane_name} (from {env}), its runtime.metrics endpoints"]
    for scrape in scrapes:
        if scrape.scraped:
            lines.append(f"{scrape.node}: scraped {scrape.url} ({len(scrape.samples)} sample(s) read)")
        else:
            where = f" {scrape.url}" if scrape.url else ""
            lines.append(f"{scrape.node}: not scraped{where}: {scrape.error}")
    return lines


def scrape_lane(site: Site, lane_name: str, lab: Path | None, scraped_at: float) -> list[NodeScrape]:
    """Scrape every endpoint of the lane (the lab's loopback endpoints with `lab`);
    `LaneMetricsError` when the lane names none."""
    targets = lane_targets(site, lane_name, ssh_targets(site, lab), lab is not None)
    return scrape_all(targets, wanted_metrics(site), scraped_at)
