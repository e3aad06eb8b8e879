"""NCCL settings per shape: a node's /etc/nccl.conf, and what its lanes' processes must load,
are the baseline's shared settings with its shape's own (`nccl.shapes`). For baseline B they
are the recipe's two configurations, key for key; the site's one block is every shape's.

Also the variant's NCCL built into the image (`provided_by: image`): nothing pinned or
audited on the host, and the lane's runtime check reads the version a process maps when its
file name tells one, and says so when it does not.

The golden nccl.conf of each shape is in tests/fixtures/nccl-shapes/; after an intended
change, regenerate it with `pytest tests/unit/test_nccl_shapes.py --update-golden`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_runtime import section

from sparkbase.audit.expected import expected_for
from sparkbase.audit.run import judge_node
from sparkbase.audit.runtime import LaneProbe, image_library_problems, lane_probe, runtime_results
from sparkbase.facts.parsers.nccl import parse_kv_conf
from sparkbase.facts.parsers.runtime import nccl_file_version
from sparkbase.facts.runtime import read_runtime
from sparkbase.model.fabric import node_shape
from sparkbase.model.site import Site, load_site
from sparkbase.render import NCCL_CONF_PATH, node_files, render_nccl_conf

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "fixtures" / "nccl-shapes"
VARIANT = "ds41f-7x-64k"
STOCK_PAGES = "ds41f-stock-pages-262k"
SITE_BASELINE = "site-stock-6.17-4k"

#: the NCCL_* environment of christopherowen/spark-ds41f config/cluster-tp4.json at a20d52a2
#: (the ring4 profile), as the recipe writes it, less the logging keys (NCCL_DEBUG,
#: NCCL_DEBUG_SUBSYS) and NCCL_THREAD_THRESHOLDS ("-2 -2 -2 1 1 1": a value with spaces,
#: which sparkbase's NCCL values never hold): the sources say so
RING4 = {
    "NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "4194304", "NCCL_COLLNET_ENABLE": "0", "NCCL_CROSS_NIC": "1",
    "NCCL_CUMEM_ENABLE": "1", "NCCL_CUMEM_HOST_ENABLE": "0", "NCCL_GIN_ENABLE": "0",
    "NCCL_IB_ADDR_FAMILY": "AF_INET", "NCCL_IB_DISABLE": "0", "NCCL_IB_GID_INDEX": "3",
    "NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0,rocep1s0f1,roceP2p1s0f1", "NCCL_IB_MERGE_NICS": "1",
    "NCCL_IB_ROCE_VERSION_NUM": "2", "NCCL_IB_SUBNET_AWARE_ROUTING": "1", "NCCL_IB_SUBNET_PREFIX_LEN": "24",
    "NCCL_IGNORE_CPU_AFFINITY": "1", "NCCL_LL128_BUFFSIZE": "262144", "NCCL_MAX_NCHANNELS": "4",
    "NCCL_MIN_NCHANNELS": "4", "NCCL_MIN_TRAFFIC_PER_CHANNEL": "512", "NCCL_MNNVL_ENABLE": "0",
    "NCCL_NET": "IB", "NCCL_NET_PLUGIN": "none", "NCCL_NVLS_ENABLE": "0", "NCCL_P2P_DISABLE": "1",
    "NCCL_PAT_ENABLE": "0", "NCCL_PROTO": "^LL128", "NCCL_RMA_DISABLE": "1", "NCCL_RUNTIME_CONNECT": "1",
    "NCCL_SHM_DISABLE": "1", "NCCL_SOCKET_IFNAME": "enP7s7", "NCCL_SWITCHLESS_BIDIRECTIONAL": "2",
}
#: the same of config/cluster-4k.json at 6a70c129 (the triangle3 profile; it sets no
#: NCCL_THREAD_THRESHOLDS)
TRIANGLE3 = {
    "NCCL_BUFFSIZE": "1048576", "NCCL_CROSS_NIC": "1", "NCCL_CUMEM_ENABLE": "0",
    "NCCL_IB_ADDR_FAMILY": "AF_INET", "NCCL_IB_DISABLE": "0", "NCCL_IB_GID_INDEX": "3",
    "NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0,rocep1s0f1,roceP2p1s0f1", "NCCL_IB_MERGE_NICS": "1",
    "NCCL_IB_ROCE_VERSION_NUM": "2", "NCCL_IB_SUBNET_AWARE_ROUTING": "1", "NCCL_IGNORE_CPU_AFFINITY": "1",
    "NCCL_LL128_BUFFSIZE": "262144", "NCCL_MAX_NCHANNELS": "8", "NCCL_NET": "IB", "NCCL_NET_PLUGIN": "none",
    "NCCL_NVLS_ENABLE": "0", "NCCL_P2P_DISABLE": "1", "NCCL_PROTO": "^LL128", "NCCL_SHM_DISABLE": "1",
    "NCCL_SOCKET_IFNAME": "enP7s7",
}


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(REPO)


def _conf(site: Site, shape: str | None, baseline: str = VARIANT) -> str:
    return render_nccl_conf(baseline, site.baselines[baseline], shape=shape).content


def test_each_shape_renders_the_recipes_configuration_key_for_key(site: Site) -> None:
    assert parse_kv_conf(_conf(site, "ring4")) == RING4
    assert parse_kv_conf(_conf(site, "triangle3")) == TRIANGLE3


def test_the_two_shapes_differ_as_the_recipes_two_configs_do(site: Site) -> None:
    ring, triangle = parse_kv_conf(_conf(site, "ring4")), parse_kv_conf(_conf(site, "triangle3"))
    differs = {key for key in {*ring, *triangle} if ring.get(key) != triangle.get(key)}
    assert differs == {key for key in {*RING4, *TRIANGLE3} if RING4.get(key) != TRIANGLE3.get(key)}
    assert "NCCL_SWITCHLESS_BIDIRECTIONAL" not in triangle and "NCCL_MIN_NCHANNELS" not in triangle
    assert (ring["NCCL_CUMEM_ENABLE"], triangle["NCCL_CUMEM_ENABLE"]) == ("1", "0")


@pytest.mark.parametrize("shape", ["ring4", "triangle3"])
def test_golden_nccl_conf_per_shape(site: Site, shape: str, request: pytest.FixtureRequest) -> None:
    rendered = _conf(site, shape)
    golden = GOLDEN / f"{VARIANT}.{shape}.nccl.conf"
    if request.config.getoption("--update-golden"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(rendered)
    assert rendered == golden.read_text()
    assert f"# Shape {shape}: the baseline's shared settings with those of nccl.shapes.{shape}." in rendered


def test_the_site_baselines_one_block_is_every_shapes(site: Site) -> None:
    """A baseline without `nccl.shapes` renders what it always did (its digest is unchanged)."""
    baseline = site.baselines[SITE_BASELINE]
    assert baseline.nccl.shapes == {}
    assert _conf(site, "ring4", SITE_BASELINE) == _conf(site, None, SITE_BASELINE)
    assert "# Shape" not in _conf(site, "ring4", SITE_BASELINE)
    assert parse_kv_conf(_conf(site, "ring4", SITE_BASELINE))["NCCL_IB_MERGE_NICS"] == "0"


def test_a_nodes_shape(site: Site) -> None:
    inventory = site.inventory
    variant, stock = site.baselines[VARIANT], site.baselines[STOCK_PAGES]
    assert node_shape(inventory, "spark1", variant) == "ring4"  # the four-node ring
    assert node_shape(inventory, "spark1", stock) == "triangle3"  # its only shape
    assert node_shape(inventory, "spark1", site.baselines[SITE_BASELINE]) == "ring4"
    kept = {name: node for name, node in inventory.nodes.items() if name != "spark4"}
    three = inventory.model_copy(update={"nodes": kept})
    assert node_shape(three, "spark1", variant) == "triangle3"  # the three-node triangle
    told = inventory.nodes["spark2"].model_copy(update={"shape": "triangle3"})
    explicit = inventory.model_copy(update={"nodes": {**inventory.nodes, "spark2": told}})
    assert node_shape(explicit, "spark2", variant) == "triangle3"  # the inventory's word wins


def test_render_for_a_ring4_node_and_a_triangle3_node(site: Site) -> None:
    """`render` of a node: its nccl.conf is its shape's (here spark2 told triangle3 by the
    inventory, spark1 on the four-node ring), and the audit judges that file."""
    told = site.inventory.nodes["spark2"].model_copy(update={"shape": "triangle3"})
    inventory = site.inventory.model_copy(update={"nodes": {**site.inventory.nodes, "spark2": told}})
    shaped = replace(site, inventory=inventory)
    ring = next(f for f in node_files(shaped, "spark1", VARIANT) if f.path == NCCL_CONF_PATH)
    triangle = next(f for f in node_files(shaped, "spark2", VARIANT) if f.path == NCCL_CONF_PATH)
    assert parse_kv_conf(ring.content) == RING4 and parse_kv_conf(triangle.content) == TRIANGLE3
    expected = expected_for(shaped, "spark2", VARIANT)
    assert expected.file(NCCL_CONF_PATH) == triangle


def test_no_host_library_is_pinned_or_audited_for_an_image_nccl(site: Site) -> None:
    from test_audit_support import converged

    baseline = site.baselines[VARIANT]
    library = baseline.nccl.library
    assert (library.provided_by, library.version) == ("image", "2.30.7")
    assert (library.path, library.sha256) == (None, None)
    assert "nccl" not in baseline.pins_by_section() and library.pin() is None
    expected = expected_for(site, "spark1", VARIANT)
    assert library.path is None and all(path is not None for path in expected.plan().hashed_paths)
    result = next(r for r in judge_node(expected, converged(expected)) if r.id == "nccl.library")
    assert result.status == "skip" and "NCCL 2.30.7 is built into the lane's image" in str(result.observed)


def _lane_site(site: Site, shape: str) -> Site:
    """The shipped site with lane ds41f-ring4 enabled on `shape` (three nodes for the triangle)."""
    lane = site.lanes["ds41f-ring4"]
    nodes = lane.nodes if shape == "ring4" else lane.nodes[:3]
    changed = lane.model_copy(update={"shape": shape, "nodes": nodes, "enabled": True})
    return replace(site, lanes={**site.lanes, "ds41f-ring4": changed})


@pytest.mark.parametrize(("shape", "want"), [("ring4", RING4), ("triangle3", TRIANGLE3)])
def test_a_lanes_processes_are_judged_on_its_shapes_settings(site: Site, shape: str, want: dict[str, str]
                                                              ) -> None:
    probe = lane_probe(_lane_site(site, shape), "ds41f-ring4")
    assert probe is not None and dict(probe.nccl_env) == want
    assert (probe.library_path, probe.library_sha256, probe.library_version) == (None, None, "2.30.7")


def _probe(site: Site, shape: str) -> LaneProbe:
    """The lane's probe, finding the test's process (`section`: an SGLang command line)."""
    probe = lane_probe(_lane_site(site, shape), "ds41f-ring4")
    assert probe is not None
    return replace(probe, match=("sglang.launch_server", "X"))


def _image_process(path: str, conf: dict[str, str]) -> Any:
    text = "".join(f"{key}={value}\n" for key, value in conf.items())
    maps = f"ffff8a400000-ffff8e1f0000 r-xp 00000000 103:02 2359814   {path}\n"
    (process,) = read_runtime(section(env="HOME=/root\0", maps=maps, system_conf=text)).processes
    return process


IMAGE_LIBRARIES = [  # the libnccl a process maps -> the check's status and what it says
    ("/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2", "pass",
     "its file name tells no NCCL version, so the version is not judged (pinned 2.30.7)"),
    ("/opt/nccl/build/lib/libnccl.so.2.30.7", "pass", "(NCCL 2.30.7, from its file name)"),
    ("/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9", "fail", "NCCL 2.28.9, pinned 2.30.7"),
]


@pytest.mark.parametrize(("path", "status", "text"), IMAGE_LIBRARIES)
def test_the_runtime_check_reads_an_image_librarys_version_when_it_can(site: Site, path: str, status: str,
                                                                         text: str) -> None:
    probe = _probe(site, "ring4")
    process = _image_process(path, RING4)
    facts: Any = SimpleNamespace(serving=(process,), containers={})
    results = {r.id: r for r in runtime_results("spark1", [probe], facts)}
    library = results["runtime.nccl_library.ds41f-ring4"]
    assert library.status == status and text in str(library.observed), library
    assert results["runtime.nccl_env.ds41f-ring4"].status == "pass"  # /etc/nccl.conf holds ring4's


def test_a_triangle_lane_on_a_ring4_nccl_conf_is_refused(site: Site) -> None:
    probe = _probe(site, "triangle3")
    facts: Any = SimpleNamespace(serving=(_image_process("/x/libnccl.so.2", RING4),), containers={})
    env = next(r for r in runtime_results("spark1", [probe], facts) if r.id == "runtime.nccl_env.ds41f-ring4")
    assert env.status == "fail"
    conf = "/etc/nccl.conf in the process's mount namespace"
    assert f"NCCL_MAX_NCHANNELS=4 ({conf}), expected NCCL_MAX_NCHANNELS=8" in str(env.observed)
    # ring4's own keys the triangle leaves at NCCL's default
    assert f"NCCL_SWITCHLESS_BIDIRECTIONAL=2 ({conf}), expected unset (shape triangle3 sets none)" in str(
        env.observed)


def test_nccl_file_version() -> None:
    assert nccl_file_version("/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9") == "2.28.9"
    assert nccl_file_version("/opt/x/libnccl.so.2") is None
    assert nccl_file_version("/opt/x/libnccl.so.2.30.7.bak") is None
    probe = lane_probe(_lane_site(load_site(REPO), "ring4"), "ds41f-ring4")
    assert probe is not None
    pinned_package = replace(probe, library_version="2.30.7-1+cuda13.0")
    assert image_library_problems(_image_process("/l/libnccl.so.2.30.7", {}), pinned_package) == []
