"""The inventory: the site's nodes, how to reach them, their ring cabling (per RDMA path),
GID index and baselines."""

from __future__ import annotations

from pydantic import Field

from sparkbase.model.shapes import ShapeName
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
        description="seconds one read may take in all: the audit's fact script, and each fact "
        "read of plan and apply; a node that freezes or hangs is reported failed after it",
    )
    operation_timeout: float = Field(
        default=1800.0, gt=0, le=86400,
        description="seconds one command of apply that changes the node may take (a package "
        "install, a DKMS build, update-initramfs); one that hangs fails its node after it",
    )


class FabricPath(StrictModel):
    """One RDMA path of a cable: a local PCIe view of the port and the peer's view it reaches.

    A cable carries two paths (the domain-0 view `enp1s0f*` is path 1, the domain-2 view
    `enP2p1s0f*` path 2); each path has its own subnet, present at exactly its two ends.
    """

    netdev: Netdev = Field(description="local network device of this path, e.g. enp1s0f0np0")
    hca: Name = Field(description="local RDMA device of this path, e.g. rocep1s0f0")
    peer_netdev: Netdev = Field(description="the peer's network device at the other end")
    subnet: IPv4Network = Field(description="this path's own subnet (a /24), shared only with the peer's end")
    address: IPv4Interface = Field(description="this end's address/prefix, inside `subnet`")


class Link(StrictModel):
    """One cable from a local ConnectX-7 port to a peer's port, and the paths it carries."""

    port: int = Field(ge=0, le=1, description="local physical port (0 or 1)")
    peer: Name = Field(description="node at the other end")
    peer_port: int = Field(ge=0, le=1, description="peer's physical port")
    paths: list[FabricPath] = Field(
        min_length=1, max_length=2, description="the RDMA paths of this cable (one per PCIe view of the port)"
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
    gid_index: int | None = Field(
        default=None, ge=0, le=255,
        description="GID index of this node's IPv4 RoCE v2 address (NCCL_IB_GID_INDEX); "
        "default: the baseline's fabric.gid_index",
    )
    shape: ShapeName | None = Field(
        default=None,
        description="the serving shape this node is cabled for (its NCCL settings are that shape's: "
        "nccl.shapes); default: the baseline's one shape, else the ring the inventory's nodes form "
        "(ring4 for four, triangle3 for three)",
    )

    def fabric_paths(self) -> list[FabricPath]:
        """Every RDMA path of this node, cable by cable."""
        return [path for link in self.links for path in link.paths]

    def addresses(self) -> dict[str, str]:
        """Netdev -> address/prefix of every path of this node."""
        return {path.netdev: path.address for path in self.fabric_paths()}


class Inventory(StrictModel):
    """`inventory/*.yaml`: nodes by name."""

    ssh: SshSettings = Field(default_factory=SshSettings, description="connection settings")
    nodes: dict[Name, Node] = Field(min_length=1, max_length=256, description="the nodes, by name")
