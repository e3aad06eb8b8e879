"""Where a lane's OpenAI-compatible API answers: a node of the lane and a port.

On the real fleet the host is that node's SSH address (its inventory alias resolved through
the site's ssh_config, as SSH and the metrics reader resolve it) and the port the lane's;
in the lab it is the lab's loopback address and the stand-in's port (the node's SSH port +
`transport.targets.LAB_METRICS_PORT_OFFSET`: the stand-in serves its API and /metrics on one
port, as SGLang and vLLM serve both on their server port), and nothing outside 127.0.0.0/8
is asked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sparkbase.gate.lane_metrics import is_loopback
from sparkbase.model.lanes import Lane
from sparkbase.qualify.client import ApiEndpoint, ApiError
from sparkbase.transport.client import Endpoint
from sparkbase.transport.client import resolve as ssh_resolve
from sparkbase.transport.targets import LAB_METRICS_PORT_OFFSET, SshTarget


def lane_api_address(lane: Lane) -> tuple[str, int] | None:
    """The node and port of the lane's API, or None when the lane names neither: its
    `runtime.endpoint`, else its metrics port on the first node that serves metrics
    (`runtime.metrics.nodes`, else the lane's head node): SGLang and vLLM serve /metrics on
    their API port."""
    runtime = lane.runtime
    if runtime is None:
        return None
    if runtime.endpoint is not None:
        return runtime.endpoint.node, runtime.endpoint.port
    if runtime.metrics is None:
        return None
    return (runtime.metrics.nodes or lane.nodes)[0], runtime.metrics.port


def api_endpoint(lane_name: str, lane: Lane, targets: Mapping[str, SshTarget], lab: bool,
                 resolve: Callable[[SshTarget], Endpoint] = ssh_resolve) -> ApiEndpoint:
    """The lane's API endpoint (see the module text); `ApiError` when it cannot be named."""
    address = lane_api_address(lane)
    if address is None:
        raise ApiError(f"lane {lane_name} names no API endpoint (lanes/{lane_name}.yaml runtime.endpoint: "
                       "{node, port}, or runtime.metrics on the API port)")
    node, port = address
    target = targets.get(node)
    if target is None:
        raise ApiError(f"lane {lane_name}: its API node {node} is not in the inventory")
    try:
        reached = resolve(target)
    except Exception as exc:  # an unreadable ssh_config is this run's reason, not a crash
        raise ApiError(f"lane {lane_name}: cannot resolve {target.alias}: {type(exc).__name__}") from None
    if lab:
        if not is_loopback(reached.hostname):
            raise ApiError(f"lane {lane_name}: lab address {reached.hostname} is not loopback; not asked")
        return ApiEndpoint(node, reached.hostname, reached.port + LAB_METRICS_PORT_OFFSET)
    return ApiEndpoint(node, reached.hostname, port)
