"""Fabric (section `fabric`), by netplan: one file configures the fabric ports (the site's
taken over when named), `netplan apply` when the live links are not the netplan's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkbase.deploy.kinds import NodeReads, Recorded, Step, StepArgs, Writes
from sparkbase.facts.parsers.fabric import Fabric
from sparkbase.render import fabric_netplan_path

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta

    from sparkbase.model.baseline import Baseline
    from sparkbase.render import RenderedFile


class NetplanFiles(StepArgs, kind="netplan-files"):
    """Only the netplan file at `path` configures the fabric `interfaces`."""

    path: str
    interfaces: list[str]

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.netplan = True

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.fabric import netplan_files
        return netplan_files(name=name, path=self.path, interfaces=self.interfaces)


class NetplanTakeover(Writes, Recorded, kind="netplan-takeover"):
    """The fabric ports' keys merged into the site's netplan file at `path`."""

    fabric: Fabric
    mode: int

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.states.append(self.path)
        into.netplan = True

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.fabric import netplan_takeover
        return netplan_takeover(name=name, path=self.path, fabric=self.fabric, mode=self.mode,
                                baseline=self.baseline)


class NetplanApply(StepArgs, kind="netplan-apply"):
    """`netplan apply` when the live fabric `links` (netdev -> mtu, addresses) differ."""

    links: dict[str, dict[str, Any]]

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.activation import netplan_apply
        return netplan_apply(name=name, trigger=trigger, links=self.links)



def netplan_files_step(baseline: Baseline) -> Step:
    """Only the fabric's netplan file configures the fabric ports: what sparkbase changed in
    other netplan files is put back first, and another file that configures one is refused."""
    path = fabric_netplan_path(baseline)
    return Step(NetplanFiles(path=path, interfaces=baseline.fabric.netdevs()),
                f"netplan: only {path} configures the fabric ports (sparkbase's edits elsewhere put back)",
                section="fabric")


def takeover_step(file: RenderedFile, fabric: Fabric) -> Step:
    """The fabric ports' keys (`fabric`) merged into the site's netplan file `file`."""
    return Step(NetplanTakeover(path=file.path, fabric=fabric, mode=file.mode),
                f"{file.path} ({file.purpose}: the fabric ports' keys merged in, the site's other keys "
                "kept; recorded)", reboot=file.needs_reboot, section=file.section)


def netplan_apply_step(baseline: Baseline, addresses: dict[str, str]) -> Step:
    """`netplan apply` after the fabric file, or whenever the live links differ from it."""
    fabric = baseline.fabric
    links = {port.netdev: {"mtu": fabric.mtu, "addresses": _addresses_of(port.netdev, addresses)}
             for port in fabric.ports}
    return Step(NetplanApply(links=links), "netplan apply (the live fabric addresses or MTU are not the "
                "netplan's)", after_change_of=fabric_netplan_path(baseline), section="fabric")


def _addresses_of(netdev: str, addresses: dict[str, str]) -> list[str]:
    """The addresses the fabric netplan gives `netdev` (none for a view with no RDMA path)."""
    return [addresses[netdev]] if netdev in addresses else []
