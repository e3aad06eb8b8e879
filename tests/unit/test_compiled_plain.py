"""Compiled expectations are plain data: what every check expects of a node holds no model object,
and the gate judges them in a fresh interpreter without importing pydantic or the baseline model.

Every node of the shipped site is compiled under every baseline of the site (each check's `expect`
runs once, on the typed model); the result is walked for model objects, then pickled with the facts
of a converged node and judged in a fresh `python -c`, as the gate judges a cached site.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel
from test_audit_support import REPO, converged, shipped

from sparkbase.audit.checks.kernel import CmdlineWant
from sparkbase.audit.compiled import CompiledNode, compile_node
from sparkbase.audit.expected import expected_for
from sparkbase.audit.registry import Crashed
from sparkbase.audit.run import judge_node
from sparkbase.facts.model import NodeFacts

SITE = shipped()
#: what judging a cached site must never import
HEAVY = ("pydantic", "sparkbase.model.baseline")
#: module prefixes no part of a want may come from
MODEL_MODULES = ("pydantic", "sparkbase.model")

#: run in the fresh interpreter: unpickle, note the modules, judge, note them again
JUDGE = """
import json, pickle, sys
heavy = json.loads(sys.argv[2])
with open(sys.argv[1], "rb") as handle:
    pairs = pickle.load(handle)
after_load = [name for name in heavy if name in sys.modules]
from sparkbase.audit.run import judge_node
verdicts = [[[r.id, r.status, r.expected, r.observed, r.fix] for r in judge_node(node, facts)]
            for node, facts in pairs]
after_judge = [name for name in heavy if name in sys.modules]
loaded = sorted(name for name in sys.modules if name.startswith("sparkbase"))
print(json.dumps({"after_load": after_load, "after_judge": after_judge, "verdicts": verdicts,
                  "loaded": loaded}))
"""


def _compiled() -> list[tuple[CompiledNode, NodeFacts]]:
    """Every node under every baseline of the site, compiled, with a converged node's facts."""
    pairs = []
    for node in sorted(SITE.inventory.nodes):
        for baseline in sorted(SITE.baselines):
            expected = expected_for(SITE, node, baseline)
            pairs.append((compile_node(expected), converged(expected)))
    return pairs


COMPILED = _compiled()


def model_parts(value: object, where: str = "want") -> Iterator[str]:
    """Where in `value` (through tuples, lists, sets, dicts and dataclass fields) a model
    object, or a value of a type defined in pydantic or `sparkbase.model`, sits."""
    module = type(value).__module__
    if isinstance(value, BaseModel) or module.startswith(MODEL_MODULES):
        yield f"{where}: {type(value).__module__}.{type(value).__qualname__}"
        return
    if isinstance(value, tuple | list | set | frozenset):
        for index, item in enumerate(value):
            yield from model_parts(item, f"{where}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from model_parts(key, f"{where} key {key!r}")
            yield from model_parts(item, f"{where}[{key!r}]")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from model_parts(getattr(value, field.name), f"{where}.{field.name}")


def test_the_walk_finds_a_model_object_however_deep() -> None:
    baseline = SITE.baselines[sorted(SITE.baselines)[0]]
    hidden = (1, {"k": [CmdlineWant((), ())]}, frozenset({"x"}), {"deep": (baseline.kernel,)})
    assert list(model_parts(hidden)) == ["want[3]['deep'][0]: sparkbase.model.baseline.KernelSpec"]
    assert list(model_parts(CmdlineWant(("a",), ()))) == []


def test_every_node_and_baseline_is_compiled() -> None:
    seen = {(node.node, node.baseline_name) for node, _ in COMPILED}
    assert seen == {(node, baseline) for node in SITE.inventory.nodes for baseline in SITE.baselines}
    assert len(seen) >= 2 * len(SITE.baselines) >= 4


@pytest.mark.parametrize(("node", "facts"), COMPILED,
                         ids=[f"{n.node}-{n.baseline_name}" for n, _ in COMPILED])
def test_no_want_holds_a_model_object(node: CompiledNode, facts: NodeFacts) -> None:
    assert node.checks, "nothing was planned"
    crashed = [planned.id for planned in node.checks if isinstance(planned.want, Crashed)]
    assert crashed == [], crashed
    found = [part for planned in node.checks for part in model_parts(planned.want, planned.id)]
    assert found == []


def test_wants_are_mostly_more_than_nothing() -> None:
    """The walk above has something to walk: most checks expect a value, several a dataclass."""
    wants = [planned.want for node, _ in COMPILED for planned in node.checks]
    assert sum(want is not None for want in wants) > len(wants) // 2
    assert any(dataclasses.is_dataclass(want) for want in wants)


def test_compiled_nodes_are_judged_without_the_model(tmp_path: Path) -> None:
    pickled = tmp_path / "compiled.pickle"
    pickled.write_bytes(pickle.dumps(COMPILED))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"),
                                                                     os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", JUDGE, str(pickled), json.dumps(HEAVY)],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    here = [[[r.id, r.status, r.expected, r.observed, r.fix] for r in judge_node(node, facts)]
            for node, facts in COMPILED]
    assert answer["verdicts"] == here
    assert answer["after_load"] == [], answer["loaded"]
    assert answer["after_judge"] == [], answer["loaded"]
