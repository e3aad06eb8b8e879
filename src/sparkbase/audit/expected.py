"""What one node should be: its baseline, the files rendered for it, its cabling.

`expected_for` is the one place the audit, the gate and the testinfra suite get a node's
expectations from; `preflight` passes the lane's baseline instead of the inventory's.
`expectations` gives several nodes' at once, kept beside the validated-site cache when the
site came from it (rendering imports jinja2 and runs every template: the gate's hot path
does neither on an unchanged site).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkbase.facts.script import FactPlan
    from sparkbase.model.baseline import Baseline
    from sparkbase.model.site import Site
    from sparkbase.render import RenderedFile

#: the name the expectations are kept under beside the validated-site cache
DERIVED_NAME = "expected"


@dataclass(frozen=True)
class CableEnd:
    """One local end of an RDMA path: the netdev, its address and the path's own subnet."""

    netdev: str
    address: str  # a.b.c.d/prefix
    subnet: str  # a.b.c.0/24, this path's alone
    peer: str
    peer_netdev: str = ""


@dataclass(frozen=True)
class Expected:
    """Everything a node is judged against."""

    node: str
    baseline_name: str
    baseline: Baseline
    files: tuple[RenderedFile, ...]
    cables: dict[str, CableEnd]  # netdev -> path end
    stamp_path: str
    #: GID index of the IPv4 RoCE v2 address on this node (the inventory's, else the baseline's)
    gid_index: int = 3
    #: the baseline the inventory assigns (differs from `baseline_name` under a lane or --baseline)
    inventory_baseline: str = ""
    #: packages only the site's other baselines pin (installed, they are leftovers)
    foreign_packages: tuple[str, ...] = ()
    #: swap files only the site's other baselines use (in /etc/fstab, they come back at boot)
    foreign_swaps: tuple[str, ...] = ()
    #: installer swap files whose /etc/fstab line only the site's other baselines mark noauto
    foreign_fstab_edits: tuple[str, ...] = ()

    def file(self, path: str) -> RenderedFile | None:
        """The rendered file at `path`, if the node must carry one."""
        return next((f for f in self.files if f.path == path), None)

    def plan(self) -> FactPlan:
        """The facts to gather to judge this node."""
        from dataclasses import replace

        from sparkbase.facts.script import plan_for

        plan = plan_for(self.baseline, [f.path for f in self.files], self.stamp_path,
                        foreign_packages=self.foreign_packages)
        return replace(plan, gid_index=self.gid_index)


def expected_for(site: Site, node: str, baseline_name: str | None = None) -> Expected:
    """Expectations of `node`: its inventory baseline, or `baseline_name` (a lane's) instead."""
    from sparkbase.model.fabric import node_gid_index
    from sparkbase.policy.foreign import foreign_for, foreign_fstab_edits, foreign_swap_files
    from sparkbase.render import STAMP_PATH, node_files

    entry = site.inventory.nodes[node]
    name = baseline_name or entry.baseline
    baseline = site.baselines[name]
    cables = {
        path.netdev: CableEnd(path.netdev, path.address, path.subnet, link.peer, path.peer_netdev)
        for link in entry.links
        for path in link.paths
    }
    return Expected(
        node=node,
        baseline_name=name,
        baseline=baseline,
        files=tuple(node_files(site, node, name)),
        cables=cables,
        stamp_path=STAMP_PATH,
        gid_index=node_gid_index(entry, baseline),
        inventory_baseline=entry.baseline,
        foreign_packages=tuple(foreign_for(site, name).package_names()),
        foreign_swaps=foreign_swap_files(site, baseline),
        foreign_fstab_edits=foreign_fstab_edits(site, baseline),
    )


def expectations(site: Site, nodes: Iterable[str], baseline_name: str | None = None) -> dict[str, Expected]:
    """`expected_for` of every node of `nodes`, in their order.

    For a site loaded through the validated-site cache, what was computed once for the very
    same site files (and sparkbase code) is reused and what is new is added to the cache;
    for any other site (loaded without the cache, or changed since) every node is computed.
    """
    from sparkbase.model import cache as site_cache

    kept = site_cache.load_derived(site, DERIVED_NAME)
    found: dict[str, Expected] = {}
    added = False
    for node in nodes:
        value = kept.get((node, baseline_name))
        if not isinstance(value, Expected):
            value = expected_for(site, node, baseline_name)
            kept[(node, baseline_name)] = value
            added = True
        found[node] = value
    if added:
        site_cache.store_derived(site, DERIVED_NAME, kept)
    return found
