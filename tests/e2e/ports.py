"""Port bases for the end-to-end labs.

Each module's lab has its own base (overridable by its own variable); every base is shifted
by `SPARKBASE_TEST_PORT_OFFSET`, so several test runs can share one machine. Under
pytest-xdist (`--dist loadfile`) a module runs whole on one worker, so module bases never
meet; the labs every worker makes for its session (`session_port_base`) are shifted by the
worker's index as well.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

#: ports between two workers' session labs (a lab has at most this many nodes)
WORKER_STRIDE = 10
#: session labs of workers 0..MAX_WORKERS-1 (2301…2444) fit below the next base in use (2451;
#: tests/unit/test_e2e_ports.py checks that no two labs share a port)
MAX_WORKERS = 15
#: the ports a lab may use above its base: its nodes, and their lane stand-ins' metrics
#: endpoints (`sparkbase.transport.targets.LAB_METRICS_PORT_OFFSET` above a node's port)
SPAN_ABOVE_BASE = 400 + 2 * WORKER_STRIDE
#: where the kernel says which local ports outgoing connections take
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_ports() -> tuple[int, int]:
    """The kernel's ephemeral port range (first, last); none when it cannot be read."""
    try:
        first, last = EPHEMERAL_RANGE.read_text().split()
        return int(first), int(last)
    except (OSError, ValueError):
        return 0, -1


def port_base(variable: str, default: int) -> int:
    """The port base named by `variable` (else `default`), plus the run's offset. A base
    whose lab would reach into the kernel's ephemeral ports is refused: any outgoing
    connection may hold a node's port just as its sshd binds it (`lab up` then times out)."""
    offset = int(os.environ.get("SPARKBASE_TEST_PORT_OFFSET", "0"))
    base = int(os.environ.get(variable, str(default))) + offset
    first, last = ephemeral_ports()
    if base <= last and base + SPAN_ABOVE_BASE >= first:
        highest = first - SPAN_ABOVE_BASE
        raise RuntimeError(f"port base {base} ({variable}, SPARKBASE_TEST_PORT_OFFSET={offset}) reaches the "
                           f"kernel's ephemeral ports {first}-{last} ({EPHEMERAL_RANGE}): outgoing "
                           f"connections may take a lab's ports; keep every base below {highest}")
    return base


def worker_index() -> int:
    """This pytest-xdist worker's index (`gw3` -> 3); 0 without xdist."""
    match = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    return int(match.group(1)) if match else 0


def session_port_base(variable: str, default: int) -> int:
    """`port_base` for a lab each worker makes for itself, shifted by the worker's index."""
    index = worker_index()
    if index >= MAX_WORKERS:
        raise RuntimeError(f"at most {MAX_WORKERS} xdist workers have session lab ports (worker {index})")
    return port_base(variable, default) + WORKER_STRIDE * index
