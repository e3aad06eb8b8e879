"""The gate's view of a site: what `preflight` and `audit` read of it, as plain data.

`view_of` builds it from the typed site: the site's name, its nodes in rank order, how to
reach them, every lane's reasons to refuse that need no node (disabled, version, shape,
contract), how to find its serving processes, and every node's compiled expectations
under its inventory baseline and under each lane's baseline. `load_view` keeps it beside
the validated-site cache under the same key (a digest of every site file, sparkbase's code
and the parsing libraries): on an unchanged site the gate computes the key, unpickles the
view and judges, without importing the typed model (pydantic), ruamel.yaml or jinja2. Any
change is a miss: the site is loaded and validated as always (its errors reported as
always), and the view built again and kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbase.audit.compiled import CompiledNode
from sparkbase.audit.runtime import LaneProbe
from sparkbase.gate.refusals import Refusal
from sparkbase.qualify.records import Shape
from sparkbase.transport.targets import SshReach

if TYPE_CHECKING:
    from sparkbase.model.site import Site

#: the name the view is kept under beside the validated-site cache
VIEW_NAME = "gate-view"


@dataclass(frozen=True)
class LaneView:
    """One lane as the gate judges it."""

    name: str
    enabled: bool
    baseline: str
    nodes: tuple[str, ...]
    #: reasons in the lane and its baseline alone (`gate.refusals.lane_refusals`)
    refusals: tuple[Refusal, ...]
    #: how to find its serving processes and what they must load (None: no runtime block)
    probe: LaneProbe | None
    #: what runs for it, as its qualified releases record it (None: its baseline is missing)
    shape: Shape | None = None


@dataclass(frozen=True)
class SiteView:
    """What the gate and the audit read of a site."""

    root: Path
    site: str
    #: every node of the inventory, in rank order
    nodes: tuple[str, ...]
    reach: SshReach
    lanes: dict[str, LaneView]
    #: (node, lane baseline or None for the inventory's) -> compiled expectations
    compiled: dict[tuple[str, str | None], CompiledNode]
    #: the model-name proxy's .env (resolved) and the key naming the active lane (site.yaml
    #: `proxy:`; None without one)
    proxy: tuple[Path, str] | None = None

    def expectations(self, nodes: Iterable[str], baseline: str | None = None) -> dict[str, CompiledNode]:
        """The compiled expectations of `nodes` (under a lane's `baseline`), in their order."""
        return {node: self.compiled[(node, baseline)] for node in nodes}

    def probes(self, lanes: Iterable[str], required: Iterable[str] = ()) -> dict[str, list[LaneProbe]]:
        """Per node, the serving processes of `lanes` to look for there; those of the
        `required` lanes must be serving (no process there is a failure, not idle)."""
        from dataclasses import replace

        from sparkbase.audit.runtime import probes_by_node

        must = set(required)

        def probe(name: str) -> LaneProbe | None:
            found = self.lanes[name].probe
            return replace(found, required=True) if found is not None and name in must else found

        return probes_by_node((self.lanes[name].nodes, probe(name)) for name in lanes)

    def active_lane(self, lab: Path | None = None) -> str | None:
        """The lane the proxy's .env names (in the lab: LAB_DIR/proxy.env), or None when the
        site has no proxy or the file cannot be read (then no lane counts as active)."""
        from sparkbase.gate.proxy_env import ProxyEnvError, active_lane, read_env

        if self.proxy is None:
            return None
        env, key = self.proxy
        path = lab / "proxy.env" if lab is not None else env
        try:
            return active_lane(read_env(path), key, path)
        except ProxyEnvError:
            return None


def view_of(site: Site) -> SiteView:
    """The gate's view of `site` (every node compiled under its baseline and each lane's)."""
    from sparkbase.audit.compiled import compile_many
    from sparkbase.audit.runtime import lane_probe
    from sparkbase.gate.refusals import lane_refusals
    from sparkbase.qualify.records import shape_of
    from sparkbase.transport.targets import reach_of

    inventory = site.inventory.nodes
    ranked = tuple(sorted(inventory, key=lambda name: inventory[name].rank))
    wanted: list[tuple[str, str | None]] = [(node, None) for node in ranked]
    lanes: dict[str, LaneView] = {}
    for name, lane in sorted(site.lanes.items()):
        if lane.baseline in site.baselines and all(node in inventory for node in lane.nodes):
            wanted += [(node, lane.baseline) for node in lane.nodes]
        shape = shape_of(site, name) if lane.baseline in site.baselines else None
        lanes[name] = LaneView(name, lane.enabled, lane.baseline, tuple(lane.nodes),
                               tuple(lane_refusals(site, name, lane)), lane_probe(site, name), shape)
    proxy = site.rules.proxy
    where = (site.path(proxy.env_file), proxy.key) if proxy is not None else None
    return SiteView(site.root, site.rules.site, ranked, reach_of(site), lanes, compile_many(site, wanted),
                    where)


def load_view(root: Path, inventory: Path | None = None) -> SiteView:
    """The view of the site at `root` (resolved): kept, or built from the loaded site and
    kept. Raises `ConfigError` (every problem of the site) as loading the site does."""
    from sparkbase.model import cache as site_cache
    from sparkbase.model.site_files import SITE_DIRECTORIES, inventory_file

    key = site_cache.site_key(root, inventory_file(root, inventory), SITE_DIRECTORIES)
    kept = site_cache.load_keyed(root, VIEW_NAME, key)
    if isinstance(kept, SiteView) and kept.root == root:
        return kept
    from sparkbase.model.site import load_site

    view = view_of(load_site(root, inventory, cache=True))
    site_cache.store_keyed(root, VIEW_NAME, key, view)
    return view
