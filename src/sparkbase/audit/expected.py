"""What one node should be: its baseline, the files rendered for it, its cabling.

`expected_for` is the one place the audit, the gate and the testinfra suite get a node's
expectations from; `preflight` passes the lane's baseline instead of the inventory's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkbase.facts.script import FactPlan
    from sparkbase.model.baseline import Baseline
    from sparkbase.model.site import Site
    from sparkbase.render import RenderedFile


@dataclass(frozen=True)
class CableEnd:
    """One local view of a ring cable: the netdev, its address and the cable's subnet."""

    netdev: str
    address: str  # a.b.c.d/prefix
    subnet: str  # a.b.c.0/24
    peer: str


@dataclass(frozen=True)
class Expected:
    """Everything a node is judged against."""

    node: str
    baseline_name: str
    baseline: Baseline
    files: tuple[RenderedFile, ...]
    cables: dict[str, CableEnd]  # netdev -> cable end
    stamp_path: str
    #: packages only the site's other baselines pin (installed, they are leftovers)
    foreign_packages: tuple[str, ...] = ()
    #: swap files only the site's other baselines use (in /etc/fstab, they come back at boot)
    foreign_swaps: tuple[str, ...] = ()

    def file(self, path: str) -> RenderedFile | None:
        """The rendered file at `path`, if the node must carry one."""
        return next((f for f in self.files if f.path == path), None)

    def plan(self) -> FactPlan:
        """The facts to gather to judge this node."""
        from sparkbase.facts.script import plan_for

        return plan_for(self.baseline, [f.path for f in self.files], self.stamp_path,
                        foreign_packages=self.foreign_packages)


def expected_for(site: Site, node: str, baseline_name: str | None = None) -> Expected:
    """Expectations of `node`: its inventory baseline, or `baseline_name` (a lane's) instead."""
    from sparkbase.policy.foreign import foreign_for, foreign_swap_files
    from sparkbase.render import (
        STAMP_PATH,
        RenderedFile,
        node_addresses,
        render_baseline,
        render_netplan,
        stamp_content,
    )

    name = baseline_name or site.inventory.nodes[node].baseline
    baseline = site.baselines[name]
    files = [
        *render_baseline(name, baseline),
        render_netplan(name, baseline, node_addresses(site, node)),
    ]
    files.sort(key=lambda f: f.path)
    stamp = RenderedFile(STAMP_PATH, stamp_content(name, baseline, files), purpose="sparkbase stamp")
    cables: dict[str, CableEnd] = {}
    for link in site.inventory.nodes[node].links:
        for netdev, address in link.addresses.items():
            cables[netdev] = CableEnd(netdev, address, link.subnet, link.peer)
    return Expected(
        node=node,
        baseline_name=name,
        baseline=baseline,
        files=(*files, stamp),
        cables=cables,
        stamp_path=STAMP_PATH,
        foreign_packages=tuple(foreign_for(site, name).package_names()),
        foreign_swaps=foreign_swap_files(site, baseline),
    )

