"""pyinfra operations sparkbase needs beyond pyinfra's own: one module per baseline section
(`model/sections.py`: `kernel.py`, `fabric.py`, `memory.py`, `secure_boot.py`, `host.py`) and
one per mechanism the sections share (`base.py`, `files.py`, `packages.py`, `dkms.py`,
`units.py`, `activation.py`, `record.py`).

Each reads facts, compares with what the baseline wants, then yields commands, or records
a no-op with its reason. Commands are built from quoted arguments. Follow-up operations
(`activation`) take their file step's `OperationMeta` (`trigger`) and act when it changes
or when the node's state shows the file has not taken effect. This package re-exports the
operations the deploy calls.
"""

from __future__ import annotations

from sparkbase.deploy.operations.activation import (
    daemon_reload,
    decide_daemon_reload,
    decide_initramfs_update,
    decide_netplan_apply,
    initramfs_update,
    netplan_apply,
)
from sparkbase.deploy.operations.base import (
    Decision,
    atomic_upload,
    carry_out,
    changed,
    cmd,
    noop,
    noop_reasons,
)
from sparkbase.deploy.operations.dkms import decide_dkms_install, dkms_install
from sparkbase.deploy.operations.files import directory, file, upload
from sparkbase.deploy.operations.host import default_target
from sparkbase.deploy.operations.kernel import decide_grub_update, grub_stale, grub_update
from sparkbase.deploy.operations.memory import (
    NotSparkbases,
    decide_swap_file,
    swap_file,
    swapon,
    sysctl_apply,
    thp,
)
from sparkbase.deploy.operations.packages import (
    APT_INSTALL,
    apt_update_for,
    hold,
    missing_pins,
    pinned_packages,
)
from sparkbase.deploy.operations.record import forget, remember, write_record
from sparkbase.deploy.operations.secure_boot import mok_import
from sparkbase.deploy.operations.units import unit_disabled, unit_enabled

__all__ = [
    "APT_INSTALL",
    "Decision",
    "NotSparkbases",
    "apt_update_for",
    "atomic_upload",
    "carry_out",
    "changed",
    "cmd",
    "daemon_reload",
    "decide_daemon_reload",
    "decide_dkms_install",
    "decide_grub_update",
    "decide_initramfs_update",
    "decide_netplan_apply",
    "decide_swap_file",
    "default_target",
    "directory",
    "dkms_install",
    "file",
    "forget",
    "grub_stale",
    "grub_update",
    "hold",
    "initramfs_update",
    "missing_pins",
    "mok_import",
    "netplan_apply",
    "noop",
    "noop_reasons",
    "pinned_packages",
    "remember",
    "swap_file",
    "swapon",
    "sysctl_apply",
    "thp",
    "unit_disabled",
    "unit_enabled",
    "upload",
    "write_record",
]
