"""A node's expectations compiled to plain data: the facts to read and what each check expects.

`compile_node` works out, from the typed model (`audit.expected.Expected`), every check that
applies to a node and what it expects there. The result (`CompiledNode`) holds nothing of
the typed model, so `expectations` keeps it beside the validated-site cache and the gate's
hot path on an unchanged site neither renders (jinja2) nor imports the model (pydantic) to
judge a node (`tests/unit/test_gate_imports.py`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkbase.audit.expected import Expected

if TYPE_CHECKING:
    from sparkbase.audit.registry import PlannedCheck
    from sparkbase.facts.script import FactPlan
    from sparkbase.model.site import Site

#: the name the compiled expectations are kept under beside the validated-site cache
DERIVED_NAME = "compiled"


@dataclass(frozen=True)
class CompiledNode:
    """A node's expectations as plain data: the facts to read and, per check, what it expects.

    Everything the audit needs to judge the node and nothing of the typed model, so it is kept
    in the site cache and unpickled without pydantic (`tests/unit/test_gate_imports.py`).
    """

    node: str
    baseline_name: str
    baseline_version: str
    plan: FactPlan
    checks: tuple[PlannedCheck, ...]
    #: the baseline the inventory assigns (differs from `baseline_name` under a lane or --baseline)
    inventory_baseline: str = ""


def compile_node(expected: Expected) -> CompiledNode:
    """What `expected` asks of the node, worked out once: every check planned with its wants."""
    from sparkbase.audit.checks import planned_checks

    return CompiledNode(
        node=expected.node,
        baseline_name=expected.baseline_name,
        baseline_version=expected.baseline.version,
        plan=expected.plan(),
        checks=tuple(planned_checks(expected)),
        inventory_baseline=expected.inventory_baseline,
    )


def compiled(expected: Expected | CompiledNode) -> CompiledNode:
    """`expected` compiled (as it is when it already is)."""
    return expected if isinstance(expected, CompiledNode) else compile_node(expected)


def expectations(site: Site, nodes: Iterable[str], baseline_name: str | None = None
                 ) -> dict[str, CompiledNode]:
    """`expected_for` of every node of `nodes`, compiled, in their order (see `compile_many`)."""
    found = compile_many(site, [(node, baseline_name) for node in nodes])
    return {node: value for (node, _), value in found.items()}


def compile_many(site: Site, wanted: Iterable[tuple[str, str | None]]
                 ) -> dict[tuple[str, str | None], CompiledNode]:
    """Every (node, baseline or None for the inventory's) of `wanted`, compiled, in order.

    For a site loaded through the validated-site cache, what was computed once for the very
    same site files (and sparkbase code) is reused and what is new is added to the cache
    (read once, written at most once); for any other site (loaded without the cache, or
    changed since) every node is computed.
    """
    from sparkbase.audit.expected import expected_for
    from sparkbase.model import cache as site_cache

    kept = site_cache.load_derived(site, DERIVED_NAME)
    found: dict[tuple[str, str | None], CompiledNode] = {}
    added = False
    for key in wanted:
        value = kept.get(key)
        if not isinstance(value, CompiledNode):
            value = compile_node(expected_for(site, *key))
            kept[key] = value
            added = True
        found[key] = value
    if added:
        site_cache.store_derived(site, DERIVED_NAME, kept)
    return found
