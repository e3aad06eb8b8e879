"""The per-path fabric model: rules as data, the node's GID index, and the audit's view of both.

Inventories are built from the variant's addressing pattern (docs/sources/ds41f-research.md,
"Fabric addressing"): port 0 to the next rank, port 1 to the previous, path 1 the
domain-0 view and path 2 the domain-2 view, `10.<a><b>.<path>.<node>/24`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_audit_support import converged, converged_node

from sparkbase.audit.run import judge_node
from sparkbase.cli.main import main
from sparkbase.facts.model import Gid
from sparkbase.model.fabric import fabric_findings, node_gid_index, ring_neighbours
from sparkbase.model.inventory import Inventory
from sparkbase.model.site import Site, load_site

REPO = Path(__file__).resolve().parents[2]
SITE = load_site(REPO)
BASELINE = "site-stock-6.17-4k"
VARIANT = "ds41f-7x-64k"
VIEWS = {1: ("enp1s0", "rocep1s0"), 2: ("enP2p1s0", "roceP2p1s0")}


def ring_inventory(count: int) -> dict[str, Any]:
    """`count` nodes cabled as a ring by the recipe's pattern (3: the triangle)."""
    nodes: dict[str, Any] = {}
    for rank in range(count):
        number = rank + 1
        links = []
        for port, peer_rank, peer_port in ((0, (rank + 1) % count, 1), (1, (rank - 1) % count, 0)):
            peer = peer_rank + 1
            low, high = sorted((number, peer))
            paths = [
                {
                    "netdev": f"{netdev}f{port}np{port}",
                    "hca": f"{hca}f{port}",
                    "peer_netdev": f"{netdev}f{peer_port}np{peer_port}",
                    "subnet": f"10.{low}{high}.{path}.0/24",
                    "address": f"10.{low}{high}.{path}.{number}/24",
                }
                for path, (netdev, hca) in VIEWS.items()
            ]
            links.append({"port": port, "peer": f"spark{peer}", "peer_port": peer_port, "paths": paths})
        nodes[f"spark{number}"] = {"ssh_host": f"spark{number}", "rank": rank, "baseline": BASELINE,
                                   "links": links}
    return {"nodes": nodes}


def messages(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(dotted path, message) of every fabric finding."""
    from sparkbase.model.yamlio import dotted

    inventory = Inventory.model_validate(data)
    return [(dotted(f.path), f.message) for f in fabric_findings(inventory, SITE.baselines)]


def path_of(data: dict[str, Any], node: str, link: int, path: int) -> dict[str, Any]:
    found: dict[str, Any] = data["nodes"][node]["links"][link]["paths"][path]
    return found


def _set(node: str, link: int, path: int, **fields: str) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        path_of(data, node, link, path).update(fields)

    return edit


def _swap_ranks(data: dict[str, Any]) -> None:
    data["nodes"]["spark2"]["rank"], data["nodes"]["spark3"]["rank"] = 2, 1


#: (what, edit of the ring4 inventory, field of the first finding, message fragment)
BROKEN: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    ("address outside its subnet", _set("spark1", 0, 1, address="10.12.9.1/24"),
     "nodes.spark1.links[0].paths[1].address", "is not in the path's subnet 10.12.2.0/24"),
    ("subnet at one end only", _set("spark1", 0, 0, subnet="10.12.9.0/24", address="10.12.9.1/24"),
     "nodes.spark1.links[0].paths[0].subnet", "the two ends of this path must share one subnet"),
    ("both views of a port in one subnet (the old layout)",
     _set("spark1", 0, 1, subnet="10.12.1.0/24", address="10.12.1.11/24"),
     "nodes.spark1.links[0].paths[1].subnet", "spark1 has two interfaces in one subnet"),
    ("a subnet overlapping another path's", _set("spark1", 0, 1, subnet="10.0.0.0/8", address="10.12.2.1/8"),
     "nodes.spark1.links[0].paths[1].subnet", "spark1 has two interfaces in one subnet"),
    ("one netdev on two paths", _set("spark1", 0, 1, netdev="enp1s0f0np0", hca="rocep1s0f0"),
     "nodes.spark1.links[0].paths[1].netdev", "enp1s0f0np0 is used twice on spark1"),
    ("the other view's HCA", _set("spark1", 0, 1, hca="rocep1s0f0"),
     "nodes.spark1.links[0].paths[1].hca", "RDMA device is roceP2p1s0f0, not rocep1s0f0"),
    ("a view of the other port", _set("spark1", 0, 1, netdev="enP2p1s0f1np1", hca="roceP2p1s0f1"),
     "nodes.spark1.links[0].paths[1].netdev", "is not a view of port 0"),
    ("the peer's view of its other port", _set("spark1", 0, 0, peer_netdev="enp1s0f0np0"),
     "nodes.spark1.links[0].paths[0].peer_netdev", "is not a view of spark2's port 1"),
    ("cables between ranks 0 and 2", _swap_ranks,
     "nodes.spark1.links[0].peer", "spark1 (rank 0) and spark2 (rank 2) are not neighbours in the ring4"),
]


def test_the_recipes_ring4_and_triangle3_are_clean() -> None:
    assert messages(ring_inventory(4)) == []
    assert messages(ring_inventory(3)) == []


def test_the_shipped_inventory_is_the_recipes_ring4() -> None:
    shipped = SITE.inventory.model_dump(mode="json", include={"nodes"})
    for node in shipped["nodes"].values():
        node.pop("management_address", None)
        node.pop("gid_index", None)
        node.pop("shape", None)
    assert shipped == ring_inventory(4)


@pytest.mark.parametrize(("what", "edit", "field", "fragment"), BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_fabric_is_refused_at_the_field(
    what: str, edit: Callable[[dict[str, Any]], None], field: str, fragment: str
) -> None:
    data = copy.deepcopy(ring_inventory(4))
    edit(data)
    found = messages(data)
    assert found, what
    assert found[0][0] == field, found
    assert any(fragment in message for _, message in found), found


@pytest.mark.parametrize(
    ("count", "node", "neighbours"),
    [(4, "spark1", {"spark2", "spark4"}), (4, "spark3", {"spark2", "spark4"}),
     (3, "spark1", {"spark2", "spark3"}), (3, "spark2", {"spark1", "spark3"}), (2, "spark1", {"spark2"})],
)
def test_ring_neighbours_by_rank(count: int, node: str, neighbours: set[str]) -> None:
    inventory = Inventory.model_validate(ring_inventory(count) if count > 2 else {
        "nodes": {f"spark{n}": {"ssh_host": f"spark{n}", "rank": n - 1, "baseline": BASELINE} for n in (1, 2)}
    })
    assert ring_neighbours(inventory)[node] == neighbours


# --- the GID index per node ------------------------------------------------------------


def site_with_gid(node: str, index: int) -> Site:
    nodes = dict(SITE.inventory.nodes)
    nodes[node] = nodes[node].model_copy(update={"gid_index": index})
    return replace(SITE, inventory=SITE.inventory.model_copy(update={"nodes": nodes}))


def test_gid_index_defaults_to_the_baselines_and_a_node_may_override_it() -> None:
    baseline = SITE.baselines[BASELINE]
    assert node_gid_index(SITE.inventory.nodes["spark2"], baseline) == baseline.fabric.gid_index == 3
    site = site_with_gid("spark2", 5)
    assert node_gid_index(site.inventory.nodes["spark2"], baseline) == 5
    assert node_gid_index(site.inventory.nodes["spark1"], baseline) == 3


def test_a_nodes_gid_index_reaches_its_fact_plan_nccl_conf_and_gid_check() -> None:
    from sparkbase.audit.expected import expected_for

    site = site_with_gid("spark2", 5)
    expected = expected_for(site, "spark2")
    assert expected.gid_index == 5 and expected.plan().gid_index == 5
    nccl = expected.file("/etc/nccl.conf")
    assert nccl is not None and "NCCL_IB_GID_INDEX=5\n" in nccl.content
    assert expected_for(site, "spark1").plan().gid_index == 3
    facts = converged(expected)
    result = next(r for r in judge_node(expected, facts) if r.id == "fabric.gid.rocep1s0f0")
    assert result.status == "pass" and str(result.expected).startswith("index 5:")


def test_a_gid_in_another_paths_subnet_is_drift() -> None:
    from sparkbase.facts.model import NodeFacts

    expected, facts = converged_node(SITE, "spark1")
    # rocep1s0f0 carries path 1 to spark2 (10.12.1.0/24); give it the spark4 path's address
    gids = {**facts.gids, "rocep1s0f0": Gid("0000:0000:0000:0000:0000:ffff:0a0e:0101", "RoCE v2")}
    drifted: NodeFacts = replace(facts, gids=gids)
    failed = [r for r in judge_node(expected, drifted) if r.status == "fail"]
    assert [r.id for r in failed] == ["fabric.gid.rocep1s0f0"]
    assert "outside 10.12.1.0/24" in str(failed[0].observed)


# --- audit --baseline and the stamp's baseline ----------------------------------------


def test_a_node_on_another_baseline_than_the_inventorys_is_a_warning() -> None:
    from sparkbase.audit.expected import expected_for

    expected = expected_for(SITE, "spark1", VARIANT)  # as `audit --baseline VARIANT`
    facts = converged(expected)
    failed = [r for r in judge_node(expected, facts) if r.status == "fail"]
    assert [(r.id, r.severity) for r in failed] == [("stamp.assignment", "warn")]
    assert "apply --baseline" in str(failed[0].fix) and BASELINE in str(failed[0].expected)
    assigned = converged_node(SITE, "spark1", VARIANT)  # the inventory assigns it: clean
    assert all(r.status != "fail" for r in judge_node(*assigned))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--baseline", VARIANT], "--baseline needs --limit"),
        (["--baseline", "nope", "--limit", "spark1"], "no baseline 'nope'"),
        (["--baseline", "spark-common", "--limit", "spark1"], "is abstract"),
    ],
)
def test_audit_baseline_refuses_what_apply_would(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", "--site", str(REPO), *extra]) == 2
    assert message in capsys.readouterr().err


# --- a lane runs on cables that exist -------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "nodes", "count", "missing"),
    [
        ("ring4", ["spark1", "spark2", "spark3", "spark4"], 4, []),
        ("ring4", ["spark2", "spark3", "spark4", "spark1"], 4, []),
        ("ring4", ["spark1", "spark3", "spark2", "spark4"], 4, ["spark1-spark3", "spark2-spark4"]),
        ("triangle3", ["spark1", "spark2", "spark3"], 3, []),  # three nodes cabled as a triangle
        ("triangle3", ["spark1", "spark2", "spark3"], 4, ["spark1-spark3"]),  # the ring4 cabling
        ("triangle3", ["spark2", "spark3", "spark4"], 4, ["spark2-spark4"]),
    ],
)
def test_a_lane_needs_a_cable_between_its_neighbours(
    shape: str, nodes: list[str], count: int, missing: list[str]
) -> None:
    from sparkbase.model.fabric import lane_cabling_findings
    from sparkbase.model.lanes import Lane

    lane = Lane.model_validate({
        "model": "m", "engine": "vllm", "baseline": BASELINE, "baseline_version": "1.0.0",
        "shape": shape, "nodes": nodes,
    })
    inventory = Inventory.model_validate(ring_inventory(count))
    found = [f.message for f in lane_cabling_findings("lane", lane, inventory)]
    assert [m.split("cable between ")[1].split(";")[0].replace(" and ", "-") for m in found] == missing
    disabled = lane.model_copy(update={"enabled": False})
    assert list(lane_cabling_findings("lane", disabled, inventory)) == []
