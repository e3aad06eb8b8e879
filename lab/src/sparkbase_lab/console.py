"""The person at a node's console: what only someone at the machine can do.

After `mokutil --import`, shim's MokManager shows its blue screen at the next boot and
enrols the key only when a person there chooses Enroll MOK → Continue → Yes, types the
password and chooses Reboot; with nobody there it times out and the boot goes on with the
key still pending. A lab node does the same: its boot enrols pending keys only when
`sparkbase lab console NODE enroll-mok` put a person at its console for that boot
(`shims/boot_step.py`). The request is kept in the node's firmware record and used up by
the next boot, whether or not a key was pending then.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparkbase.atomicfile import write_atomic
from sparkbase_lab.fleet import Lab, LabError

#: what a person at the console can do, and what each does at the next boot
ACTIONS: dict[str, str] = {
    "enroll-mok": "at the next boot, enrol the pending MOK keys in MokManager (Enroll MOK → Continue → "
                  "Yes → the password → Reboot)",
}
#: the firmware record's key holding the console request of the next boot
CONSOLE_KEY = "console"


def _firmware_path(lab: Lab, node: str) -> Path:
    if node not in lab.node_names:
        raise LabError(f"unknown node {node!r} (nodes: {', '.join(lab.node_names)})")
    return lab.node_dir(node) / "firmware" / "firmware.json"


def request(lab: Lab, node: str, action: str) -> str:
    """Put a person at `node`'s console for its next boot to do `action`; what they will do."""
    if action not in ACTIONS:
        raise LabError(f"unknown console action {action!r} (one of {', '.join(ACTIONS)})")
    path = _firmware_path(lab, node)
    try:
        firmware: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise LabError(f"{node} has no firmware record yet: bring the lab up first") from None
    except (OSError, ValueError) as exc:
        raise LabError(f"{node}'s firmware record is unreadable: {exc}") from exc
    firmware[CONSOLE_KEY] = action
    write_atomic(path, json.dumps(firmware, indent=1, sort_keys=True) + "\n")
    pending = len(firmware.get("pending", []))
    return f"{ACTIONS[action]} ({pending} key(s) pending now)"
