"""What one node should be: its baseline, the files rendered for it, its cabling.

`expected_for` is the one place the audit, the gate and the testinfra suite get a node's
expectations from; `preflight` passes the lane's baseline instead of the inventory's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sparkbase.facts.areas import plan_for
from sparkbase.facts.script import FactPlan
from sparkbase.model.baseline import Baseline
from sparkbase.model.fabric import node_gid_index
from sparkbase.model.site import Site
from sparkbase.policy.foreign import foreign_for, foreign_fstab_edits, foreign_swap_files
from sparkbase.render import STAMP_PATH, NetplanPath, RenderedFile, node_files, node_paths


@dataclass(frozen=True)
class Expected:
    """Everything a node is judged against."""

    node: str
    baseline_name: str
    baseline: Baseline
    #: the files sparkbase writes there: those of the sections the baseline manages
    files: tuple[RenderedFile, ...]
    cables: dict[str, NetplanPath]  # netdev -> this end of its RDMA path
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
        plan = plan_for(self.baseline, [f.path for f in self.files], self.stamp_path,
                        foreign_packages=self.foreign_packages)
        # the fabric part of the site's netplan file is judged on its exact text
        return replace(plan, gid_index=self.gid_index, netplan_files=any(f.merged for f in self.files))


def expected_for(site: Site, node: str, baseline_name: str | None = None) -> Expected:
    """Expectations of `node`: its inventory baseline, or `baseline_name` (a lane's) instead."""
    entry = site.inventory.nodes[node]
    name = baseline_name or entry.baseline
    baseline = site.baselines[name]
    return Expected(
        node=node,
        baseline_name=name,
        baseline=baseline,
        files=tuple(node_files(site, node, name)),
        cables=node_paths(site, node),
        stamp_path=STAMP_PATH,
        gid_index=node_gid_index(entry, baseline),
        inventory_baseline=entry.baseline,
        foreign_packages=tuple(foreign_for(site, name).package_names()),
        foreign_swaps=foreign_swap_files(site, baseline),
        foreign_fstab_edits=foreign_fstab_edits(site, baseline),
    )
