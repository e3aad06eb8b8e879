"""The as-found lab's pure parts: what the operators wrote on each node (netplan, GRUB edit,
the `docker run` of the lane), the operator faults' `docker run` again from `docker inspect`,
and `sparkbase lab up --as-found` reaching `as_found.up` (no node needed)."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparkbase.cli.main import main
from sparkbase.model.site import Site, load_site
from sparkbase_lab import as_found, operator_faults
from sparkbase_lab.fleet import LabError
from sparkbase_lab.shims import docker_images, docker_state
from sparkbase_lab.shims.cmd_docker import RUN_BOOL_FLAGS, RUN_VALUE_FLAGS
from sparkbase_lab.shims.docker_show import parse_options


@pytest.fixture
def site(tmp_path: Path, make_site: Callable[[Path], Path]) -> Site:
    return load_site(make_site(tmp_path / "site"))


def test_the_fabric_netplan_has_the_inventorys_addresses(site: Site) -> None:
    from ruamel.yaml import YAML

    text = as_found.fabric_netplan(site, "spark2", 9000)
    ethernets = YAML(typ="safe").load(text)["network"]["ethernets"]
    wanted = {p.netdev: [str(p.address)] for link in site.inventory.nodes["spark2"].links for p in link.paths}
    assert {name: conf["addresses"] for name, conf in ethernets.items()} == wanted
    assert {conf["mtu"] for conf in ethernets.values()} == {9000}


def test_management_addresses_start_at_the_notes_head_address(site: Site) -> None:
    assert site.inventory.nodes["spark1"].management_address is None
    assert [as_found.management_address(site, n) for n in ("spark1", "spark4")] == ["10.69.43.170/24",
                                                                                   "10.69.43.173/24"]
    assert "enP7s7:" in as_found.mgmt_netplan("10.69.43.170/24")


def test_the_grub_edit_drops_the_forbidden_and_adds_the_wanted(site: Site, tmp_path: Path) -> None:
    shipped = site.baselines["site-stock-6.17-4k"]
    kernel = shipped.kernel.model_copy(update={"cmdline_add": ["iommu.passthrough=1"]})
    baseline = shipped.model_copy(update={"kernel": kernel})
    grub = tmp_path / "grub"
    grub.write_text('GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet splash kho=off"\n'
                    'GRUB_CMDLINE_LINUX=""\n')
    script = as_found.grub_edit(baseline).replace("/etc/default/grub", str(grub))
    subprocess.run(shlex.split(script), check=True)
    assert grub.read_text().splitlines()[1] == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu.passthrough=1"'


def test_the_lane_container_is_run_as_the_operator_ran_it(site: Site) -> None:
    argv = as_found.run_argv(site, "spark3")
    assert argv[:2] == ["docker", "run"]
    flags, rest = parse_options(argv[2:], RUN_VALUE_FLAGS, RUN_BOOL_FLAGS, "run")
    baseline = site.baselines["site-stock-6.17-4k"]
    assert flags["name"] == [as_found.CONTAINER] and flags["network"] == ["host"] and flags["ipc"] == ["host"]
    assert flags["cpuset"] == ["5-9,15-19"] and flags["restart"] == ["unless-stopped"]
    assert f"{baseline.nccl.library.path}:{docker_images.TORCH_NCCL_PATH}:ro" in flags["volume"]
    assert "NCCL_IB_MERGE_NICS=0" in flags["env"]
    assert f"NCCL_IB_HCA={','.join(baseline.nccl.settings.ib_hca)}" in flags["env"]
    image, command = rest[0], rest[1:]
    assert image == docker_images.PRODUCTION_REFERENCE
    assert command[command.index("--node-rank") + 1] == "2"
    assert command[command.index("--dist-init-addr") + 1] == "10.69.43.170:5000"
    runtime = site.lanes[as_found.LANE].runtime
    assert runtime is not None and all(word in " ".join(command) for word in runtime.match)


def test_an_inventory_gid_index_reaches_the_container(site: Site) -> None:
    nodes = site.inventory.nodes
    nodes["spark4"] = nodes["spark4"].model_copy(update={"gid_index": 5})
    assert "NCCL_IB_GID_INDEX=5" in as_found.container_env(site, "spark4")
    assert "NCCL_IB_GID_INDEX=3" in as_found.container_env(site, "spark1")


def _document(site: Site) -> dict[str, Any]:
    """`docker inspect` of the lane's container as the node's docker prints it."""
    flags, rest = parse_options(as_found.run_argv(site, "spark1")[2:], RUN_VALUE_FLAGS, RUN_BOOL_FLAGS, "run")
    image = docker_images.CATALOGUE[0]
    record = {
        "id": "ab" * 32, "name": flags["name"][0], "created": "2026-10-02T08:00:01Z", "image_ref": rest[0],
        "image_id": image["id"], "path": rest[1], "args": rest[2:], "cmd": rest[1:], "entrypoint": None,
        "env": [*image["env"], *flags["env"]], "binds": flags["volume"], "network": "host", "ipc": "host",
        "cpuset": flags["cpuset"][0], "gpus": True, "restart": "unless-stopped", "hostname": "spark1",
        "sandbox": "cd" * 32, "endpoint": "ef" * 32, "layer": "01" * 32,
        "state": {"status": "running", "pid": 9, "start": 1, "workers": [], "exit_code": 0,
                  "started_at": "2026-10-02T08:00:02Z", "finished_at": docker_state.ZERO_TIME},
    }
    printed: dict[str, Any] = json.loads(docker_state.go_json(docker_state.container_document(record, image)))
    return printed


def test_a_fault_runs_the_container_again_as_docker_inspect_shows_it(site: Site) -> None:
    document = _document(site)
    again = operator_faults.run_argv(document)
    flags, rest = parse_options(again[2:], RUN_VALUE_FLAGS, RUN_BOOL_FLAGS, "run")
    original, original_rest = parse_options(as_found.run_argv(site, "spark1")[2:], RUN_VALUE_FLAGS,
                                            RUN_BOOL_FLAGS, "run")
    for key in ("name", "network", "ipc", "cpuset", "restart", "volume", "gpus"):
        assert flags[key] == original[key], key
    assert rest == original_rest
    changed = operator_faults.run_argv(document, env=["A=1"], image=docker_images.NEXT_REFERENCE)
    flags, rest = parse_options(changed[2:], RUN_VALUE_FLAGS, RUN_BOOL_FLAGS, "run")
    assert flags["env"] == ["A=1"] and rest[0] == docker_images.NEXT_REFERENCE


def test_operator_fault_arguments() -> None:
    assert operator_faults.check_arg("container-env", None) == "dsv41-flash"
    assert operator_faults.check_arg("stale-address", None) == "enp1s0f0np0"
    with pytest.raises(LabError, match="unknown fabric netdev"):
        operator_faults.check_arg("stale-address", "eth0")
    assert operator_faults.stale_address(3, "enp1s0f0np0") == "192.168.100.3/24"


def test_lab_up_as_found_calls_the_as_found_lab(tmp_path: Path, make_site: Callable[[Path], Path],
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    called: list[tuple[Path, bool]] = []

    def up(lab: Any, site: Site, fresh: bool = False, timeout: float = 60.0) -> bool:
        called.append((lab.dir, fresh))
        return True

    monkeypatch.setattr(as_found, "up", up)
    site_dir = make_site(tmp_path / "site")
    lab_dir = str(tmp_path / "lab")
    code = main(["lab", "--dir", lab_dir, "up", "--as-found", "--site", str(site_dir), "--fresh"])
    assert code == 0 and called == [(tmp_path / "lab", True)]
    assert "lab up as found" in capsys.readouterr().out
