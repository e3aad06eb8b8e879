"""A per-run baseline assignment: move nodes to another baseline for one apply.

The inventory on disk stays what the site agreed; `with_assignment` returns a copy of the
loaded `Site` whose inventory assigns `baseline` to `nodes`. The renderer and the deploy
read that copy like any site. Whether the move breaks the site contract is judged by
`contract_breaches` in the caller, which demands a recorded policy override.
"""

from __future__ import annotations

import dataclasses

from sparkbase.model.rules import contract_breaches
from sparkbase.model.site import Site


class AssignmentError(ValueError):
    """The requested assignment names no usable baseline."""


def with_assignment(site: Site, nodes: list[str], baseline: str) -> Site:
    """A copy of `site` whose inventory assigns `baseline` to each of `nodes`."""
    if baseline in site.abstract_baselines:
        raise AssignmentError(f"baseline '{baseline}' is abstract: it cannot be assigned")
    if baseline not in site.baselines:
        raise AssignmentError(
            f"no baseline '{baseline}' (have: {', '.join(sorted(site.baselines))})"
        )
    assigned = {
        name: node.model_copy(update={"baseline": baseline}) if name in nodes else node
        for name, node in site.inventory.nodes.items()
    }
    inventory = site.inventory.model_copy(update={"nodes": assigned})
    return dataclasses.replace(site, inventory=inventory)


def breaches_by_baseline(site: Site, nodes: list[str]) -> dict[str, list[str]]:
    """Baseline name -> contract breach messages, for the baselines `nodes` are assigned."""
    out: dict[str, list[str]] = {}
    for node in nodes:
        name = site.inventory.nodes[node].baseline
        breaches = contract_breaches(site.rules.contract, site.baselines[name])
        if breaches:
            out[name] = [b.message() for b in breaches]
    return out
