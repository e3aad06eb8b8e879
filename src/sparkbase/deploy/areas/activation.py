"""Activation (shared): systemd reloads a unit file it has not loaded as on disk (memory,
cpuset). A section's own activation is its kind (update-grub, sysctl -p, netplan apply,
update-initramfs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkbase.deploy.kinds import NodeReads, StepArgs

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta


class DaemonReload(StepArgs, kind="daemon-reload"):
    """`systemctl daemon-reload` when systemd has not loaded `unit` as on disk."""

    unit: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.reload.append(self.unit)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.activation import daemon_reload
        return daemon_reload(name=name, trigger=trigger, unit=self.unit)

