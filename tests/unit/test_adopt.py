"""`sparkbase adopt`'s pure core: the GID-table reader, the fabric found from four Sparks
cabled as a ring, rank order, grouping nodes into baselines, lanes found from serving
processes, the questions at their FILE:LINE, and the same bytes for the same facts."""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from adopt_fakes import NODES, RELEASE, fleet, ring_facts

from sparkbase.adopt import Adopted, Starter, adopt_site
from sparkbase.adopt.baselines import adopt_plan
from sparkbase.adopt.fabric import discover, pci_domain, physical_port, rank_order
from sparkbase.adopt.lanes import find_lanes, pinned_image
from sparkbase.cli.adopt import aliases_of, load_starter
from sparkbase.facts.areas import section_names
from sparkbase.facts.model import NodeFacts
from sparkbase.facts.parsers.docker import Container
from sparkbase.facts.parsers.fabric import GID_TABLE_COMMAND, GID_TABLE_SECTION, parse_gid_table
from sparkbase.facts.parsers.runtime import ProcCgroup
from sparkbase.facts.runtime import ServingProcess
from sparkbase.model.site import load_site

REPO = Path(__file__).resolve().parents[2]
REAL = REPO / "tests" / "fixtures" / "real"
TIME = "2026-12-01T02:00:00Z"
SSH = {"inventory/known_hosts": "", "inventory/ssh_config": "Host spark1\n  HostName 127.0.0.1\n"}


@pytest.fixture(scope="module")
def starter() -> Starter:
    return load_starter()


def adopt(facts: dict[str, NodeFacts], starter: Starter, time: str = TIME) -> Adopted:
    return adopt_site(facts, starter, time, SSH)


# --- the GID tables --------------------------------------------------------------------


def show_gids_as_section() -> str:
    """The real `show_gids` rows (which read the same sysfs files) as the GID-table section
    prints them: FILE, GID, the type file's text (the kernel's `IB/RoCE v1` / `RoCE v2`),
    the netdev."""
    kinds = {version: (REAL / f"SECONDBEST__sys_class_infiniband_gid_attrs_types_N__RoCE{version}.txt")
             .read_text().strip() for version in ("v1", "v2")}
    lines = []
    for row in (REAL / "show_gids__mlx5_RoCE__nccl-1573.txt").read_text().splitlines()[2:]:
        fields = row.split()
        dev, port, index, gid, kind, ndev = fields[0], fields[1], fields[2], fields[3], fields[-2], fields[-1]
        lines.append(f"/sys/class/infiniband/{dev}/ports/{port}/gids/{index}\t{gid}\t{kinds[kind]}\t{ndev}")
    return "\n".join(lines) + "\n"


def test_the_gid_table_reads_real_entries() -> None:
    entries = parse_gid_table(show_gids_as_section())
    assert len(entries) == 8
    found = {(e.hca, e.index): e for e in entries}
    # show_gids: mlx5_0 index 7 is the v2 entry of 10.152.0.12 on net1; index 6 its v1 twin
    assert found["mlx5_0", 7].roce_v2_ipv4 == "10.152.0.12" and found["mlx5_0", 7].ndev == "net1"
    assert found["mlx5_0", 6].roce_v2_ipv4 is None
    assert found["mlx5_1", 7].roce_v2_ipv4 == "10.152.4.12" and found["mlx5_1", 7].port == 1
    assert found["mlx5_0", 5].roce_v2_ipv4 is None  # link-local, RoCE v2: no IPv4 in it


def test_the_gid_table_skips_empty_slots_and_refuses_other_lines() -> None:
    empty = "/sys/class/infiniband/x/ports/1/gids/9\t0000:0000:0000:0000:0000:0000:0000:0000\t\t\n"
    assert parse_gid_table(empty) == ()
    with pytest.raises(ValueError):
        parse_gid_table("/etc/passwd\tx\ty\tz\n")
    with pytest.raises(ValueError):
        parse_gid_table("one field\n")


def test_the_gid_table_command_reads_a_sysfs_tree(tmp_path: Path) -> None:
    """The section's shell, run by dash over a sysfs-shaped tree: filled slots only, the type
    and netdev of a slot the kernel will not describe left empty."""
    port = tmp_path / "rocep1s0f0" / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / sub).mkdir(parents=True)
    (port / "gids" / "3").write_text("0000:0000:0000:0000:0000:ffff:0a0c:0101\n")
    (port / "gid_attrs/types/3").write_text("RoCE v2\n")
    (port / "gid_attrs/ndevs/3").write_text("enp1s0f0np0\n")
    (port / "gids" / "4").write_text("0000:0000:0000:0000:0000:0000:0000:0000\n")
    (port / "gids" / "5").write_text("0000:0000:0000:0000:0000:ffff:0a0c:0102\n")
    command = GID_TABLE_COMMAND.replace("/sys/class/infiniband", shlex.quote(str(tmp_path)))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout
    entries = parse_gid_table(out.replace(str(tmp_path), "/sys/class/infiniband"))
    assert [(e.index, e.gid.type, e.ndev, e.roce_v2_ipv4) for e in entries] == [
        (3, "RoCE v2", "enp1s0f0np0", "10.12.1.1"), (5, None, None, None)]


def test_adopt_asks_for_the_gid_tables_and_every_engine(starter: Starter) -> None:
    plan = adopt_plan(starter.template)
    assert plan.gid_tables and set(plan.serving_matches) == {"sglang", "vllm"}
    assert GID_TABLE_SECTION in section_names(plan)
    assert plan.mok_keys  # capture's additions kept


# --- the fabric ------------------------------------------------------------------------


def test_netdev_names_carry_port_and_domain() -> None:
    assert (physical_port("enp1s0f1np1"), pci_domain("enp1s0f1np1")) == (1, 0)
    assert (physical_port("enP2p1s0f0np0"), pci_domain("enP2p1s0f0np0")) == (0, 2)
    assert physical_port("enP7s7") is None


def test_the_ring_is_found_as_the_shipped_inventory_cables_it() -> None:
    fabric = discover(fleet())
    assert fabric.notes == ()
    shipped = load_site(REPO).inventory
    for node in NODES:
        found = fabric.nodes[node]
        want = [(link.port, link.peer, link.peer_port,
                 [(p.netdev, p.hca, p.peer_netdev, p.subnet, p.address) for p in link.paths])
                for link in shipped.nodes[node].links]
        got = [(c.port, c.peer, c.peer_port,
                [(p.netdev, p.hca, p.peer_netdev, p.subnet, p.address) for p in c.paths])
               for c in found.cables]
        assert got == want, node
        assert (found.mtu, found.gid_index) == (9000, 3)
    assert rank_order(NODES, fabric).nodes == NODES


def test_rank_order_follows_the_cables_when_sorted_aliases_do_not() -> None:
    cabled = ("west", "north", "east", "south")  # the ring's order; sorted: east north south west
    fabric = discover({node: ring_facts(node, cabled) for node in cabled})
    order = rank_order(cabled, fabric)
    assert order.nodes == ("east", "south", "west", "north")
    assert "port 0" in order.how


def test_a_path_without_its_peer_is_said_not_invented() -> None:
    facts = {node: ring_facts(node) for node in NODES[:3]}  # spark4 not read
    fabric = discover(facts)
    assert all(cable.peer != "spark4" for found in fabric.nodes.values() for cable in found.cables)
    assert any("10.14.1.0/24: no peer" in note for note in fabric.notes)


# --- baselines -------------------------------------------------------------------------


def test_identical_nodes_share_one_baseline_named_by_kernel_and_page_size(starter: Starter) -> None:
    adopted = adopt(fleet(), starter)
    assert [(g.name, g.nodes) for g in adopted.groups] == [(f"adopted-{RELEASE}-4k", NODES)]
    site = adopted.files[f"baselines/adopted-{RELEASE}-4k.yaml"]
    assert f"kernel.release: {{kind: captured, node: spark1, time: '{TIME}'}}" in site
    assert "fabric.ports: {kind: captured" in site


def test_a_node_that_differs_gets_its_own_baseline(starter: Starter) -> None:
    adopted = adopt(fleet(kernel_release="6.17.0-1040-nvidia"), starter)
    assert [(g.name, g.nodes) for g in adopted.groups] == [
        (f"adopted-{RELEASE}-4k", NODES[:3]), ("adopted-6.17.0-1040-nvidia-4k", NODES[3:])]
    inventory = adopted.files["inventory/site.yaml"]
    assert "baseline: adopted-6.17.0-1040-nvidia-4k" in inventory


def test_a_moved_gid_index_stays_the_nodes_own(starter: Starter) -> None:
    facts = fleet()
    facts["spark3"] = replace(ring_facts("spark3", gid_index=5), nccl_conf=facts["spark3"].nccl_conf)
    adopted = adopt(facts, starter)
    assert len(adopted.groups) == 1 and adopted.groups[0].gid_index == 3
    inventory = adopted.files["inventory/site.yaml"]
    block = inventory.split("  spark3:")[1].split("  spark4:")[0]
    assert "gid_index: 5" in block and "gid_index" not in inventory.split("  spark3:")[0]


# --- lanes -----------------------------------------------------------------------------


def running(name: str, image_ref: str, repo_digests: tuple[str, ...], cid: str = "c" * 64) -> Container:
    """A running container as `docker inspect` (and its image's RepoDigests) shows it."""
    return Container(id=cid, name=name, image_ref=image_ref, image_id="sha256:" + "e" * 64,
                     repo_digests=repo_digests, env=(), mounts=(), command=(), running=True,
                     network_mode="host")


DIGEST = "sha256:" + "f617afd8" + "0" * 56
IMAGE = "aidendle94/sparkrun-sglang-dsv41-gb10"
LIBRARY = "/opt/nccl-site/lib/libnccl.so.2.27.7"


def sglang_server(pid: int, container: str) -> ServingProcess:
    """A server in Docker container `container` (its cgroup names it: `container_id`)."""
    from sparkbase.facts.parsers.runtime import MappedFile

    return ServingProcess(
        pid=pid, args=("python3", "-m", "sglang.launch_server", "--model-path",
                       "/models/DeepSeek-V4.1-Flash-1017", "--port", "8000", "--enable-metrics"),
        environ={"NCCL_IB_MERGE_NICS": "0", "NCCL_IB_GID_INDEX": "3", "NCCL_DEBUG": "WARN"},
        cpus=None, cgroup=ProcCgroup(f"/system.slice/docker-{container}.scope"),
        libraries=(MappedFile(LIBRARY),), library_sha256={LIBRARY: "a" * 64},
        user_conf=None, system_conf=None)


def lane_fleet() -> dict[str, NodeFacts]:
    out: dict[str, NodeFacts] = {}
    for index, node in enumerate(NODES):
        cid = f"{index:02d}" + "c" * 62
        base = ring_facts(node)
        container = running("dsv41-flash", f"{IMAGE}:r1", (f"{IMAGE}@{DIGEST}",), cid)
        out[node] = replace(base, serving=(sglang_server(100 + index, cid),), containers={cid: container})
    return out


def test_a_container_lane_is_found_with_its_image_pinned_and_its_nccl() -> None:
    [lane] = find_lanes(lane_fleet(), NODES)
    assert (lane.name, lane.engine, lane.model, lane.nodes) == (
        "dsv41-flash", "sglang", "/models/DeepSeek-V4.1-Flash-1017", NODES)
    assert lane.match == ("sglang.launch_server", "DeepSeek-V4.1-Flash-1017")  # a match starts with a letter
    assert lane.container is not None and lane.container.image == f"{IMAGE}@{DIGEST}"
    assert (lane.head, lane.port, lane.metrics, lane.unit) == ("spark1", 8000, True, None)
    assert lane.nccl == {"NCCL_DEBUG": "WARN", "NCCL_IB_GID_INDEX": "3", "NCCL_IB_MERGE_NICS": "0"}
    assert lane.library == (LIBRARY, "a" * 64)


def test_an_image_is_pinned_by_the_digest_of_its_own_repository() -> None:
    other = "docker.io/library/other@sha256:" + "1" * 64
    mine = f"{IMAGE}@{DIGEST}"
    assert pinned_image(running("x", f"{IMAGE}:r1", (other, mine))) == mine
    assert pinned_image(running("x", mine, ())) == mine
    assert pinned_image(running("x", "jovian-judgement:r39-glm53", ())) is None


def test_a_lane_file_is_written_per_engine_with_the_nccl_it_loads(starter: Starter) -> None:
    adopted = adopt(lane_fleet(), starter)
    text = adopted.files["lanes/dsv41-flash.yaml"]
    assert "engine: sglang" in text and "nodes: [spark1, spark2, spark3, spark4]" in text
    assert "dsv41-flash" in text
    baseline = adopted.files[f"baselines/adopted-{RELEASE}-4k.yaml"]
    assert "NCCL_DEBUG: WARN" in baseline and f"path: {LIBRARY}" in baseline
    assert "provided_by: site" in baseline  # no package installed: a file the site put there
    # every value under the starter's `nccl.library` placeholder is now captured: it is gone
    assert "nccl.library: {kind: placeholder" not in baseline
    assert "nccl.library.sha256: {kind: captured" in baseline


# --- questions and bytes -----------------------------------------------------------------


def test_each_question_points_at_its_placeholder(starter: Starter) -> None:
    adopted = adopt(lane_fleet(), starter)
    keys = {(q.file, q.key) for q in adopted.questions}
    assert ("lanes/dsv41-flash.yaml", "proxy") in keys
    assert ("baselines/site.yaml", "proxy") in keys
    assert ("inventory/site.yaml", "nodes.spark1.rank") in keys
    assert (f"baselines/adopted-{RELEASE}-4k.yaml", "version") in keys
    for question in adopted.questions:
        line = adopted.files[question.file].splitlines()[question.line - 1]
        assert "placeholder" in line or line.lstrip().startswith(question.key.split(".")[-1] + ":"), question
    [lane_question] = [q for q in adopted.questions if q.file.startswith("lanes/")]
    at, text = lane_question.line, lane_question.text
    assert lane_question.shown() == f"lanes/dsv41-flash.yaml:{at}: {text} (proxy)"


def test_the_same_facts_give_the_same_bytes_and_time_only_in_sources(starter: Starter) -> None:
    first, again = adopt(lane_fleet(), starter), adopt(lane_fleet(), starter)
    assert first.files == again.files
    later = adopt(lane_fleet(), starter, "2027-01-01T00:00:00Z")
    for path, text in first.files.items():
        pairs = zip(text.splitlines(), later.files[path].splitlines(), strict=True)
        changed = [(a, b) for a, b in pairs if a != b]
        assert all("time: '2026-12-01T02:00:00Z'" in a and "kind: captured" in a for a, _b in changed), path


def test_the_adopted_site_validates(starter: Starter, tmp_path: Path) -> None:
    for path, text in adopt(fleet(), starter).files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    site = load_site(tmp_path)
    assert set(site.inventory.nodes) == set(NODES)
    placeholders = [p for p in site.warnings if p.message.startswith("placeholder: ")]
    assert placeholders  # the starter's unconfirmed values stay placeholders


def test_every_host_alias_that_is_not_a_pattern_is_a_node() -> None:
    config = "Host spark2\n  HostName a\nHost spark1 gate\n  Port 22\nHost *.lan !x\n  User root\nHost *\n"
    assert aliases_of(config) == ["gate", "spark1", "spark2"]


# --- the command's refusals (before any node is asked) ------------------------------------


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    from sparkbase.cli.main import main

    code = main(["adopt", *argv])
    return code, capsys.readouterr().err


def test_the_command_refuses_bad_usage_before_reading_a_node(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, known = tmp_path / "ssh_config", tmp_path / "known_hosts"
    config.write_text("Host spark1\n  HostName 127.0.0.1\n  Port 1\n")
    known.write_text("")
    out = tmp_path / "out"
    files = ("--ssh-config", str(config), "--known-hosts", str(known))
    code, err = refusal(capsys, "--out", str(out))
    assert code == 2 and "--ssh-config FILE and --known-hosts FILE" in err
    code, err = refusal(capsys, "--out", str(out), *files, "--time", "yesterday")
    assert code == 2 and "not an ISO-8601 UTC time" in err
    code, err = refusal(capsys, "--out", str(out), *files, "--node", "spark9")
    assert code == 2 and "no Host spark9" in err and "have: spark1" in err
    code, err = refusal(capsys, "--out", str(out), *files, "--limit", "spark2")
    assert code == 2 and "--limit spark2" in err
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, err = refusal(capsys, "--out", str(out), *files)
    assert code == 2 and "not empty" in err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_an_unreachable_node_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, known = tmp_path / "ssh_config", tmp_path / "known_hosts"
    config.write_text("Host spark1\n  HostName 127.0.0.1\n  Port 1\n  User root\n")  # nothing listens
    known.write_text("")
    out = tmp_path / "out"
    code, err = refusal(capsys, "--out", str(out), "--ssh-config", str(config), "--known-hosts", str(known))
    assert code == 3 and "spark1 unreachable" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["known_hosts", "ssh_config"]  # no DIR, no temp
