"""End to end: plan and apply read a node's facts in one batched round trip, and the batch
is a pure speed-up: every fact a prepare reads answers the same in the batch as alone, on
factory-fresh nodes (every baseline of the site) and on converged ones.

The probe (fact_probe.py, its own process: pyinfra patches the interpreter with gevent)
asks both ways and counts the SSH commands pyinfra runs on each node; plan's own debug log
says how each node's facts were read (`session._prepare_host`).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleets import ConvergedImage, Fleet, clone_fleet, fleet_for_module
from ports import port_base

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_FACT_BATCH_PORT_BASE", 3101)
CONVERGED_PORT_BASE = port_base("SPARKBASE_TEST_FACT_BATCH_CONVERGED_PORT_BASE", 3111)
PROBE = Path(__file__).with_name("fact_probe.py")
NODES = ["spark1", "spark2", "spark3", "spark4"]
READ = re.compile(r"(?P<node>spark\d): facts read in (?P<batches>\d+) batch round trip\(s\) "
                  r"\((?P<answers>\d+) answers\) and (?P<singles>\d+) single one\(s\) (?P<which>\[.*?\]);")
#: a plan of one node before the memo made ~49 round trips (one per fact asked); with it: the
#: batch, and at most pyinfra's own `files.line` fact and a lane check
MOST_PLAN_ROUND_TRIPS = 3
#: a no-op apply adds taking and releasing the node lock
MOST_NOOP_APPLY_ROUND_TRIPS = 5


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    yield from fleet_for_module(tmp_path_factory, "factbatch", PORT_BASE)


@pytest.fixture(scope="module")
def converged(tmp_path_factory: pytest.TempPathFactory, converged_image: ConvergedImage) -> Iterator[Fleet]:
    """Two nodes of the converged image, with a copy of the site (and local state) it was converged with."""
    base = tmp_path_factory.mktemp("factbatch-converged")
    site = base / "site"
    shutil.copytree(converged_image.site, site)
    for lab in clone_fleet(converged_image, base / "lab", CONVERGED_PORT_BASE, nodes=2):
        yield Fleet(lab, site)


def probe(tmp_path: Path, *args: str) -> Any:
    out = tmp_path / "probe.json"
    done = subprocess.run([sys.executable, str(PROBE), args[0], str(out), *args[1:]], capture_output=True,
                          text=True, timeout=600, check=False)
    assert out.exists(), done.stdout + done.stderr
    return json.loads(out.read_text())


def compared(fleet: Fleet, tmp_path: Path, baseline: str, nodes: list[str]) -> dict[str, Any]:
    return probe(tmp_path, "compare", str(fleet.site), str(fleet.lab.dir), baseline, *nodes)  # type: ignore[no-any-return]


def assert_same_both_ways(found: dict[str, Any], nodes: list[str]) -> None:
    assert sorted(found) == sorted(nodes)
    for node, result in found.items():
        assert result["asks"] >= 30, (node, result)
        assert result["unanswered"] == {}, (node, result)
        assert result["mismatches"] == [], (node, result)


def facts_read(fleet: Fleet, *args: str) -> dict[str, dict[str, Any]]:
    """How `plan ARGS` read each node's facts (its debug log)."""
    done = fleet.sparkbase("plan", "--log-level", "debug", *args)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return {m["node"]: {"batches": int(m["batches"]), "singles": m["which"]}
            for m in READ.finditer(done.stderr)}


def round_trips(fleet: Fleet, tmp_path: Path, memo: bool, *args: str) -> dict[str, int]:
    """SSH commands pyinfra ran on each node during `sparkbase ARGS` (with or without the memo)."""
    argv = [args[0], "--site", str(fleet.site), "--lab-dir", str(fleet.lab.dir), *args[1:]]
    return probe(tmp_path, "count", *([] if memo else ["--no-memo"]), "--", *argv)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("baseline", "nodes"), [
    ("-", NODES),
    ("ds41f-7x-64k", ["spark2"]),
    ("ds41f-stock-pages-262k", ["spark3"]),
])
def test_on_factory_nodes_every_fact_answers_the_same_batched_as_alone(
    factory: Fleet, tmp_path: Path, baseline: str, nodes: list[str],
) -> None:
    assert_same_both_ways(compared(factory, tmp_path, baseline, nodes), nodes)


def test_a_factory_plan_reads_every_fact_in_its_batch(factory: Fleet) -> None:
    site = facts_read(factory)
    variant = facts_read(factory, "--limit", "spark2", "--baseline", "ds41f-7x-64k")
    assert site == {node: {"batches": 1, "singles": "[]"} for node in NODES}
    assert variant == {"spark2": {"batches": 1, "singles": "[]"}}


def test_a_factory_plan_makes_a_few_round_trips_not_one_per_fact(factory: Fleet, tmp_path: Path) -> None:
    before = round_trips(factory, tmp_path, False, "plan", "--limit", "spark1")
    after = round_trips(factory, tmp_path, True, "plan", "--limit", "spark1")
    assert before["spark1"] >= 40, before  # every fact its own round trip
    assert after["spark1"] <= MOST_PLAN_ROUND_TRIPS, after


def test_on_converged_nodes_every_fact_answers_the_same_batched_as_alone(
    converged: Fleet, tmp_path: Path,
) -> None:
    assert_same_both_ways(compared(converged, tmp_path, "-", ["spark1", "spark2"]), ["spark1", "spark2"])


def test_a_noop_apply_of_a_converged_node_reads_its_facts_in_one_batch(
    converged: Fleet, tmp_path: Path,
) -> None:
    assert facts_read(converged, "--limit", "spark1", "spark2") == {
        node: {"batches": 1, "singles": "[]"} for node in ("spark1", "spark2")
    }
    found = round_trips(converged, tmp_path, True, "apply", "--limit", "spark1", "--yes", "--json")
    assert found["spark1"] <= MOST_NOOP_APPLY_ROUND_TRIPS, found
    again = converged.apply("spark1")
    assert all(op["status"] == "unchanged" for op in again.values()), again
