"""The emulated fleet runs lanes: each lane's unit on each of its nodes, as the site would.

`unit_text` is the lane's systemd unit for the lab (pure): its ExecStart is the stand-in
serving process (`shim.py __serve__` followed by the engine's own command line, so the
lane's `match` strings find it), in the baseline's serving slice, with the pinned NCCL
library to map and a metrics port from the lab's range (the node's SSH port +
`METRICS_PORT_OFFSET`: nodes share the machine's loopback). `start`/`stop` install the unit
and run `systemctl start|stop` in each node over SSH; the node's `systemctl` runs or ends
the process (lab/shims/cmd_serving.py). `proxy_env` is the lab's stand-in for the
model-name proxy's `.env` (LABDIR/proxy.env).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbase.transport.targets import LAB_METRICS_PORT_OFFSET
from sparkbase_lab.fleet import PROXY_ENV, Lab, LabError

if TYPE_CHECKING:
    from sparkbase.model.site import Site

#: metrics port of a node's lane stand-in = the node's SSH port + this (the gate reads it there)
METRICS_PORT_OFFSET = LAB_METRICS_PORT_OFFSET
SHIM = "/usr/local/lib/sparkbase-lab/shim.py"
#: the libnccl a lane whose baseline has no host library maps (`provided_by: image`): the one
#: built into its image, named as NCCL's own `make install` names it (a lab stand-in file)
IMAGE_NCCL = "/opt/lane-image/lib/libnccl.so.2.30.7"
UNIT_DIR = "/etc/systemd/system"


def engine_args(engine: str, model: str) -> list[str]:
    """The engine's own command line for `model` (what a real lane unit runs)."""
    if engine == "sglang":
        return ["-m", "sglang.launch_server", "--model-path", model, "--tp", "4", "--enable-metrics"]
    return ["vllm", "serve", model, "--tensor-parallel-size", "4"]


def unit_name(site: Site, lane_name: str) -> str:
    """The lane's unit (its runtime block's, else `lane-NAME.service`)."""
    runtime = site.lanes[lane_name].runtime
    return runtime.unit if runtime is not None and runtime.unit else f"lane-{lane_name}.service"


def unit_text(site: Site, lane_name: str, metrics_port: int) -> str:
    """The lab unit of `lane_name` on a node whose metrics port is `metrics_port`."""
    lane = site.lanes[lane_name]
    baseline = site.baselines[lane.baseline]
    argv = ["/usr/bin/python3", "-S", SHIM, "__serve__", *engine_args(lane.engine, lane.model)]
    return "\n".join([
        "[Unit]",
        f"Description=sparkbase lab stand-in for lane {lane_name} ({lane.engine})",
        "",
        "[Service]",
        "X-SparkbaseLab=serving",
        f"ExecStart={shlex.join(argv)}",
        f"Slice={baseline.cpuset.slice}",
        f"Environment=SPARKBASE_LAB_NCCL={baseline.nccl.library.path or IMAGE_NCCL} "
        f"SPARKBASE_LAB_METRICS_PORT={metrics_port}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])


def metrics_port(lab: Lab, node: str) -> int:
    """The metrics port of `node`'s lane stand-in."""
    return lab.port(node) + METRICS_PORT_OFFSET


def _systemctl(lab: Lab, node: str, line: str) -> None:
    status, _out, err = lab.run(node, line, timeout=60)
    if status != 0:
        raise LabError(f"{node}: {line.split(';')[-1].strip()}: exit {status}: {err.strip()[-300:]}")


def start(lab: Lab, site: Site, lane_name: str) -> list[str]:
    """Install and start the lane's unit on each of its nodes; the nodes."""
    unit = unit_name(site, lane_name)
    nodes = list(site.lanes[lane_name].nodes)
    for node in nodes:
        text = unit_text(site, lane_name, metrics_port(lab, node))
        path = f"{UNIT_DIR}/{unit}"
        _systemctl(lab, node, f"mkdir -p {UNIT_DIR}; printf %s {shlex.quote(text)} > {shlex.quote(path)}; "
                              f"systemctl start {shlex.quote(unit)}")
    return nodes


def stop(lab: Lab, site: Site, lane_name: str) -> list[str]:
    """Stop the lane's unit on each of its nodes (the unit file stays, as installed)."""
    unit = unit_name(site, lane_name)
    nodes = list(site.lanes[lane_name].nodes)
    for node in nodes:
        _systemctl(lab, node, f"systemctl stop {shlex.quote(unit)}")
    return nodes


def restart(lab: Lab, site: Site, lane_name: str, node: str) -> None:
    """Restart the lane's unit on one node (a fault injected since takes effect)."""
    _systemctl(lab, node, f"systemctl restart {shlex.quote(unit_name(site, lane_name))}")


def proxy_env(lab: Lab) -> Path:
    """The lab's model-name proxy .env."""
    return lab.dir / PROXY_ENV


def write_proxy_env(lab: Lab, key: str, lane_name: str) -> Path:
    """A fresh proxy .env naming `lane_name` (a few other lines, as a real one has)."""
    path = proxy_env(lab)
    path.write_text(f"# model-name proxy (sparkbase lab)\nLISTEN=127.0.0.1:8080\n{key}={lane_name}\n")
    return path
