"""The inventory: the site's nodes, how to reach them, their ring cabling and baselines."""

from __future__ import annotations

from pydantic import Field

from sparkbase.model.types import IPv4Interface, IPv4Network, Name, Netdev, SshAlias, StrictModel


class SshSettings(StrictModel):
    """How sparkbase, pyinfra, testinfra and OpenSSH reach the nodes."""

    config: str | None = Field(
        default=None,
        max_length=255,
        description="ssh_config file (relative to the site) that defines each node's alias",
    )
    known_hosts: str = Field(
        default="inventory/known_hosts",
        max_length=255,
        description="known_hosts file (relative to the site); host keys are checked strictly",
    )
    user: Name = Field(default="root", description="login user")
    sudo: bool = Field(default=False, description="use sudo for changes (non-root user)")
    connect_timeout: float = Field(default=5.0, gt=0, le=120, description="seconds")
    command_timeout: float = Field(
        default=60.0, gt=0, le=3600,
        description="seconds one remote read (the audit's fact script) may take in all; a node "
        "that freezes mid-audit is reported unreachable after it",
    )


class Link(StrictModel):
    """One ring cable from a local ConnectX-7 port to a peer's port."""

    port: int = Field(ge=0, le=1, description="local physical port (0 or 1)")
    peer: Name = Field(description="node at the other end")
    peer_port: int = Field(ge=0, le=1, description="peer's physical port")
    subnet: IPv4Network = Field(description="the /24 both ends of this cable share")
    addresses: dict[Netdev, IPv4Interface] = Field(
        description="address of each local PCIe view of this port (two per port)"
    )


class Node(StrictModel):
    """One DGX Spark."""

    ssh_host: SshAlias = Field(description="SSH alias (ssh_config Host); never a raw address")
    rank: int = Field(ge=0, le=255, description="rank in the ring (0-based)")
    management_address: str | None = Field(
        default=None, max_length=64, description="enP7s7 address; the site's to fill"
    )
    baseline: Name = Field(description="baseline this node must carry")
    links: list[Link] = Field(default_factory=list, max_length=2, description="ring cables (one per port)")


class Inventory(StrictModel):
    """`inventory/*.yaml`: nodes by name."""

    ssh: SshSettings = Field(default_factory=SshSettings, description="connection settings")
    nodes: dict[Name, Node] = Field(min_length=1, max_length=256, description="the nodes, by name")
