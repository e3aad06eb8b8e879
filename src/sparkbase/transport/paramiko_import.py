"""paramiko, imported lightly: the one place that imports it for the whole transport.

A leaf (it imports no sparkbase module), so the client, the failure classifier and the
target checks all call it before `import paramiko` without importing each other.
"""

from __future__ import annotations

import sys
import threading

_IMPORT_LOCK = threading.Lock()


def import_paramiko() -> None:
    """Import paramiko without `invoke` (a third of paramiko's import time, asyncio and
    unittest.mock included), which paramiko needs only for ssh_config `Match exec`;
    `_ssh_config` brings it back for a config that has one. Call before `import paramiko`."""
    with _IMPORT_LOCK:
        if "paramiko" in sys.modules or "invoke" in sys.modules:
            return
        sys.modules["invoke"] = None  # type: ignore[assignment]  # import blocker
        try:
            import paramiko  # noqa: F401  # imported for its side effect on sys.modules
        finally:
            del sys.modules["invoke"]
