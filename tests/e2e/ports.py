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

#: ports between two workers' session labs (a lab has at most this many nodes)
WORKER_STRIDE = 10
#: session labs of workers 0..MAX_WORKERS-1 (2301…2444) fit below the next base in use (2451;
#: tests/unit/test_e2e_ports.py checks that no two labs share a port)
MAX_WORKERS = 15


def port_base(variable: str, default: int) -> int:
    """The port base named by `variable` (else `default`), plus the run's offset."""
    offset = int(os.environ.get("SPARKBASE_TEST_PORT_OFFSET", "0"))
    return int(os.environ.get(variable, str(default))) + offset


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
