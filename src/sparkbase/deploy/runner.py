"""plan and apply, the deploy's entry points (the CLI and the tests import them from here).

The work lives in two rooms: `deploy/session.py` (one pyinfra session over a node set:
connect, lock, prepare, execute, results; `plan`) and `deploy/rollout.py` (`apply`: the
parallel converge, the drain, the serial reboot rollout and its waits). How a node is
reached, and why it could not be, is the transport's (`sparkbase.transport`).
"""

from __future__ import annotations

from sparkbase.deploy.rollout import REBOOT_MARKER, apply, rollout_one, wait_rebooted
from sparkbase.deploy.session import Options, Prepared, Session, host_data, patch_gevent, plan

__all__ = [
    "REBOOT_MARKER",
    "Options",
    "Prepared",
    "Session",
    "apply",
    "host_data",
    "patch_gevent",
    "plan",
    "rollout_one",
    "wait_rebooted",
]
