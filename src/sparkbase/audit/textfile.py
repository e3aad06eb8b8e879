"""The audit as node_exporter's textfile collector reads it, written by prometheus_client.

`audit --format prometheus --output /var/lib/node_exporter/textfile/sparkbase.prom` writes
this text (atomically, see `sparkbase.atomicfile`). prometheus_client escapes label values
and formats numbers as Prometheus does; this module only says which gauges there are.
Imported only for that format: the library is not on the gate's path.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sparkbase.audit.run import AuditReport


def to_prometheus(report: AuditReport) -> str:
    """The report as Prometheus text exposition (one gauge family per fact)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_AuditGauges(report))
    return generate_latest(registry).decode("utf-8")


class _AuditGauges(Collector):
    """The gauges of one finished audit (a collector read once, by `generate_latest`)."""

    def __init__(self, report: AuditReport) -> None:
        self.report = report

    def collect(self) -> Iterator[Metric]:
        """Check results, reachability, drift per node, when and how long."""
        report = self.report
        checks = GaugeMetricFamily(
            "sparkbase_check_ok", "1 when a sparkbase check passes on a node (node=fleet: agreement)",
            labels=["node", "check", "severity"],
        )
        for result in report.all_results():
            if result.status != "skip":
                checks.add_metric([result.node or "fleet", result.id, result.severity],
                                  1 if result.status == "pass" else 0)
        yield checks
        reachable = GaugeMetricFamily(
            "sparkbase_node_reachable", "1 when the node answered the audit", labels=["node"]
        )
        drift = GaugeMetricFamily(
            "sparkbase_node_drift_checks", "failed error-severity checks per node", labels=["node"]
        )
        for node in report.nodes:
            reachable.add_metric([node.node], int(node.reachable))
            drift.add_metric([node.node], len(node.blocking))
        yield reachable
        yield drift
        yield GaugeMetricFamily(
            "sparkbase_audit_timestamp_seconds", "when the audit ran (Unix time)", value=report.started_at
        )
        yield GaugeMetricFamily(
            "sparkbase_audit_duration_seconds", "how long the audit took", value=report.elapsed_seconds
        )
