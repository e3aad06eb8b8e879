"""Port bases for the end-to-end labs.

Each module's lab has its own base (overridable by its own variable); every base is shifted
by `SPARKBASE_TEST_PORT_OFFSET`, so several test runs can share one machine.
"""

from __future__ import annotations

import os


def port_base(variable: str, default: int) -> int:
    """The port base named by `variable` (else `default`), plus the run's offset."""
    offset = int(os.environ.get("SPARKBASE_TEST_PORT_OFFSET", "0"))
    return int(os.environ.get(variable, str(default))) + offset
