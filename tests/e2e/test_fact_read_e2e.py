"""End to end: plan and apply read a node's facts in one round trip, by the audit's fact
script, and read the same facts as the audit's own SSH client does, on factory-fresh nodes
(every baseline of the site) and on converged ones.

The probe (fact_probe.py, its own process: pyinfra patches the interpreter with gevent)
reads both ways and counts the SSH commands pyinfra runs on each node; plan's own debug log
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
READ = re.compile(r"(?P<node>spark\d): facts read in (?P<trips>\d+) round trip\(s\)")
#: a plan of one node before the memo made ~49 round trips (one per fact asked); with the one
#: read: the fact script, and at most pyinfra's own `files.line` fact and a lane check
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
        assert result["sections"] >= 30, (node, result)
        assert result["differences"] == [], (node, result)


def facts_read(fleet: Fleet, *args: str) -> dict[str, int]:
    """How many round trips `plan ARGS` took to read each node's facts (its debug log)."""
    done = fleet.sparkbase("plan", "--log-level", "debug", *args)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return {m["node"]: int(m["trips"]) for m in READ.finditer(done.stderr)}


def round_trips(fleet: Fleet, tmp_path: Path, *args: str) -> dict[str, int]:
    """SSH commands pyinfra ran on each node during `sparkbase ARGS`."""
    argv = [args[0], "--site", str(fleet.site), "--lab-dir", str(fleet.lab.dir), *args[1:]]
    return probe(tmp_path, "count", "--", *argv)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("baseline", "nodes"), [
    ("-", NODES),
    ("ds41f-7x-64k", ["spark2"]),
    ("ds41f-stock-pages-262k", ["spark3"]),
])
def test_on_factory_nodes_plan_reads_what_the_audit_reads(
    factory: Fleet, tmp_path: Path, baseline: str, nodes: list[str],
) -> None:
    assert_same_both_ways(compared(factory, tmp_path, baseline, nodes), nodes)


def test_a_factory_plan_reads_each_node_once(factory: Fleet) -> None:
    site = facts_read(factory)
    variant = facts_read(factory, "--limit", "spark2", "--baseline", "ds41f-7x-64k")
    assert site == dict.fromkeys(NODES, 1)
    assert variant == {"spark2": 1}


def test_a_factory_plan_makes_a_few_round_trips_not_one_per_fact(factory: Fleet, tmp_path: Path) -> None:
    found = round_trips(factory, tmp_path, "plan", "--limit", "spark1")
    assert found["spark1"] <= MOST_PLAN_ROUND_TRIPS, found


def test_on_converged_nodes_plan_reads_what_the_audit_reads(converged: Fleet, tmp_path: Path) -> None:
    assert_same_both_ways(compared(converged, tmp_path, "-", ["spark1", "spark2"]), ["spark1", "spark2"])


def test_a_noop_apply_of_a_converged_node_reads_its_facts_once(converged: Fleet, tmp_path: Path) -> None:
    assert facts_read(converged, "--limit", "spark1", "spark2") == {"spark1": 1, "spark2": 1}
    found = round_trips(converged, tmp_path, "apply", "--limit", "spark1", "--yes", "--json")
    assert found["spark1"] <= MOST_NOOP_APPLY_ROUND_TRIPS, found
    again = converged.apply("spark1")
    assert all(op["status"] == "unchanged" for op in again.values()), again
