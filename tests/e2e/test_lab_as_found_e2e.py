"""The lab as the site's fleet is found (`sparkbase lab up --as-found`, this module's own lab on
ports 3311…): what a real tool sees on the nodes (`docker inspect`, the serving process's
/proc files, the netplan, no sparkbase record, the lane's API and metrics on the head node),
each operator fault (`container-env`, `container-image`, `stale-address`) done and undone,
a reboot (the container comes back by its restart policy) and `down`/`up` resuming the
as-found disks. Nothing here runs sparkbase against the nodes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from fleets import NODES, Fleet, as_found_fleet
from ports import port_base

from sparkbase.model.ownership import OWNERSHIP_PATH
from sparkbase.model.site import load_site
from sparkbase.render import GRUB_DROPIN_PATH, MODPROBE_PATH, NETPLAN_PATH, STAMP_PATH, SYSCTL_PATH
from sparkbase_lab import as_found, faults, packages
from sparkbase_lab.shims import docker_images

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_AS_FOUND_PORT_BASE", 3311)
CONTAINER = as_found.CONTAINER
METRICS_OFFSET = 400


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    yield from as_found_fleet(tmp_path_factory, "as-found", PORT_BASE)


def inspect(fleet: Fleet, node: str, *words: str) -> dict[str, Any]:
    documents: list[dict[str, Any]] = json.loads(fleet.sh(node, " ".join(["docker", "inspect", *words])))
    assert len(documents) == 1
    return documents[0]


def server_pid(fleet: Fleet, node: str) -> int:
    return int(fleet.sh(node, f"docker inspect -f '{{{{.State.Pid}}}}' {CONTAINER}").strip())


def http_get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        return answer.status, answer.read().decode()


def test_docker_inspect_shows_the_lane_container(found: Fleet) -> None:
    site = load_site(found.site)
    baseline = site.baselines[site.lanes[as_found.LANE].baseline]
    for node in NODES:
        document = inspect(found, node, CONTAINER)
        assert document["Name"] == f"/{CONTAINER}" and document["State"]["Running"] is True
        assert document["Config"]["Image"] == docker_images.PRODUCTION_REFERENCE
        assert docker_images.PRODUCTION_REFERENCE.split("@")[1].startswith("sha256:f617afd8")
        image = inspect(found, node, "--type", "image", document["Image"])
        assert image["Id"] == document["Image"]
        assert image["RepoDigests"] == [docker_images.PRODUCTION_REFERENCE] and image["RepoTags"] == []
        host = document["HostConfig"]
        assert (host["NetworkMode"], host["IpcMode"], host["CpusetCpus"]) == ("host", "host", "5-9,15-19")
        assert host["RestartPolicy"]["Name"] == "unless-stopped"
        nccl = [m for m in document["Mounts"] if m["Destination"] == docker_images.TORCH_NCCL_PATH]
        assert nccl == [{"Type": "bind", "Source": baseline.nccl.library.path,
                         "Destination": docker_images.TORCH_NCCL_PATH, "Mode": "ro", "RW": False,
                         "Propagation": "rprivate"}]
        env = document["Config"]["Env"]
        for key, value in baseline.nccl.settings.as_env().items():
            assert f"{key}={value}" in env
        rank = site.inventory.nodes[node].rank
        assert document["Path"] == "python3"
        assert document["Args"][:2] == ["-m", "sglang.launch_server"]
        assert document["Args"][document["Args"].index("--node-rank") + 1] == str(rank)


def test_the_serving_process_is_the_containers_as_the_host_sees_it(found: Fleet) -> None:
    site = load_site(found.site)
    library = site.baselines[site.lanes[as_found.LANE].baseline].nccl.library
    for node in NODES:
        document = inspect(found, node, CONTAINER)
        pid = server_pid(found, node)
        workers = found.sh(node, f"pgrep -P {pid}").split()
        assert len(workers) == 2
        scope = f"0::/system.slice/docker-{document['Id']}.scope"
        for each in [str(pid), *workers]:
            assert found.sh(node, f"cat /proc/{each}/cgroup").strip() == scope
            assert "Cpus_allowed_list:\t5-9,15-19" in found.sh(node, f"cat /proc/{each}/status")
        environ = found.sh(node, f"tr '\\0' '\\n' < /proc/{pid}/environ").splitlines()
        build = "SPARKBASE_LAB_BUILD=" + docker_images.build_of(document["Image"])  # the lab's marker
        assert environ == [f"HOSTNAME={node}", *document["Config"]["Env"], "HOME=/root", build]
        cmdline = found.sh(node, f"tr '\\0' ' ' < /proc/{pid}/cmdline")
        assert all(word in cmdline for word in site.lanes[as_found.LANE].runtime.match)  # type: ignore[union-attr]
        maps = found.sh(node, f"grep -F libnccl /proc/{pid}/maps")
        assert maps.split()[-1] == docker_images.TORCH_NCCL_PATH
        digest = found.sh(node, f"sha256sum < /proc/{pid}/root{docker_images.TORCH_NCCL_PATH}").split()[0]
        assert digest == library.sha256
        # the image's path exists only in the container's mount namespace
        assert found.lab.run(node, f"test -e {docker_images.TORCH_NCCL_PATH}")[0] != 0


def test_the_nodes_are_as_the_operators_left_them(found: Fleet) -> None:
    site = load_site(found.site)
    baseline = site.baselines[site.lanes[as_found.LANE].baseline]
    for node in NODES:
        assert found.sh(node, "uname -r").strip() == baseline.kernel.release
        driver = found.sh(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").strip()
        assert driver == baseline.driver.version
        cmdline = found.sh(node, "cat /proc/cmdline")
        assert not set(baseline.kernel.cmdline_forbid) & set(cmdline.split())
        netplan = found.sh(node, f"cat {as_found.FABRIC_NETPLAN}")
        addresses = json.loads(found.sh(node, "ip -j addr show"))
        given = {a["ifname"]: [f"{i['local']}/{i['prefixlen']}" for i in a["addr_info"]] for a in addresses}
        for link in site.inventory.nodes[node].links:
            for path in link.paths:
                assert f"{path.netdev}:" in netplan and str(path.address) in netplan
                assert given[path.netdev] == [str(path.address)]
        assert given["enP7s7"] == [as_found.management_address(site, node)]
        for key, value in baseline.memory.sysctls.items():
            assert found.sh(node, f"sysctl -n {key}").strip() == str(value)
        assert found.sh(node, "systemctl get-default").strip() == baseline.host.boot_target
        library = found.sh(node, f"sha256sum {baseline.nccl.library.path}").split()[0]
        assert library == baseline.nccl.library.sha256 == packages.NCCL_SITE_SHA256
        # a plain file: no package installed it
        assert found.lab.run(node, f"dpkg-query -W {packages.NCCL_SITE_PACKAGE}")[0] != 0
        for owned in (OWNERSHIP_PATH, STAMP_PATH, NETPLAN_PATH, SYSCTL_PATH, GRUB_DROPIN_PATH, MODPROBE_PATH):
            assert found.lab.run(node, f"test -e {owned}")[0] != 0, f"{node}: {owned} is sparkbase's"
        assert found.lab.run(node, f"test -s {as_found.SYSCTL_FILE}")[0] == 0


def test_the_lane_answers_on_the_head_node_only(found: Fleet) -> None:
    head = found.lab.port("spark1") + METRICS_OFFSET
    status, metrics = http_get(head, "/metrics")
    assert status == 200 and "sglang:num_running_reqs" in metrics
    status, models = http_get(head, "/v1/models")
    card = json.loads(models)["data"][0]
    assert status == 200 and card["owned_by"] == "sglang"
    assert card["id"] == card["root"] == "deepseek-ai/DeepSeek-V4.1-Flash-1017"
    for node in NODES[1:]:
        with pytest.raises(urllib.error.URLError):
            http_get(found.lab.port(node) + METRICS_OFFSET, "/metrics")


def test_the_proxy_env_names_the_lane(found: Fleet) -> None:
    proxy = load_site(found.site).rules.proxy
    assert proxy is not None
    key = proxy.key
    assert f"{key}={as_found.LANE}\n" in (found.lab.dir / "proxy.env").read_text()


def test_docker_fails_as_docker_does(found: Fleet) -> None:
    status, out, err = found.lab.run("spark1", "docker inspect nothere")
    assert (status, out, err) == (1, "[]\n", "Error: No such object: nothere\n")
    status, out, err = found.lab.run("spark1", "docker stop nothere")
    assert (status, out, err) == (1, "", "Error response from daemon: No such container: nothere\n")
    status, _out, err = found.lab.run("spark1", f"docker rm {CONTAINER}")
    assert status == 1 and "container is running: stop the container before removing or force remove" in err
    status, _out, err = found.lab.run("spark1", f"docker run -d --name {CONTAINER} {as_found.IMAGE}")
    assert status == 125 and f'The container name "/{CONTAINER}" is already in use' in err
    lines = found.sh("spark1", "docker ps --format json").splitlines()
    assert [json.loads(line)["Names"] for line in lines] == [CONTAINER]


def test_fault_container_env_runs_it_again_with_merge_nics_1(found: Fleet) -> None:
    before = inspect(found, "spark2", CONTAINER)
    faults.inject(found.lab, "spark2", "container-env")
    try:
        after = inspect(found, "spark2", CONTAINER)
        assert after["Id"] != before["Id"] and after["State"]["Running"] is True
        assert "NCCL_IB_MERGE_NICS=1" in after["Config"]["Env"]
        assert "NCCL_IB_MERGE_NICS=0" not in after["Config"]["Env"]
        environ = found.sh("spark2", f"tr '\\0' '\\n' < /proc/{server_pid(found, 'spark2')}/environ")
        assert "NCCL_IB_MERGE_NICS=1" in environ.splitlines()
        assert "container-env" in faults.read(found.lab, "spark2")
        assert inspect(found, "spark1", CONTAINER)["Config"]["Env"] == before["Config"]["Env"]
    finally:
        faults.clear(found.lab, "spark2", "container-env")
    cleared = inspect(found, "spark2", CONTAINER)
    assert cleared["Config"]["Env"] == before["Config"]["Env"]
    assert "container-env" not in faults.read(found.lab, "spark2")


def test_fault_container_image_runs_another_digest_of_the_repository(found: Fleet) -> None:
    before = inspect(found, "spark3", CONTAINER)
    faults.inject(found.lab, "spark3", "container-image")
    try:
        after = inspect(found, "spark3", CONTAINER)
        assert after["Config"]["Image"] == docker_images.NEXT_REFERENCE
        assert after["Image"] != before["Image"] and after["State"]["Running"] is True
        image = inspect(found, "spark3", "--type", "image", after["Image"])
        assert image["RepoDigests"] == [docker_images.NEXT_REFERENCE]
        assert after["Config"]["Env"][-4:] == before["Config"]["Env"][-4:]  # the operator's -e kept
    finally:
        faults.clear(found.lab, "spark3", "container-image")
    assert inspect(found, "spark3", CONTAINER)["Config"]["Image"] == docker_images.PRODUCTION_REFERENCE


def test_fault_stale_address_leaves_a_port_two_addresses(found: Fleet) -> None:
    site = load_site(found.site)
    wanted = next(str(p.address) for link in site.inventory.nodes["spark4"].links for p in link.paths
                  if p.netdev == "enp1s0f0np0")

    def addresses() -> list[str]:
        data = json.loads(found.sh("spark4", "ip -j addr show dev enp1s0f0np0"))
        return [f"{i['local']}/{i['prefixlen']}" for i in data[0]["addr_info"]]

    faults.inject(found.lab, "spark4", "stale-address")
    try:
        assert addresses() == ["192.168.100.4/24", wanted]
        assert found.lab.run("spark4", "test -e /etc/netplan/30-fabric-old.yaml")[0] == 0
    finally:
        faults.clear(found.lab, "spark4", "stale-address")
    assert addresses() == [wanted]


def test_a_reboot_brings_the_container_back(found: Fleet) -> None:
    before = inspect(found, "spark4", CONTAINER)
    found.lab.reboot("spark4")
    after = inspect(found, "spark4", CONTAINER)
    assert after["Id"] == before["Id"] and after["State"]["Running"] is True
    assert after["State"]["Pid"] != before["State"]["Pid"]
    pid = after["State"]["Pid"]
    scope = f"0::/system.slice/docker-{after['Id']}.scope"
    assert found.sh("spark4", f"cat /proc/{pid}/cgroup").strip() == scope


def test_down_and_up_resumes_the_as_found_disks(found: Fleet) -> None:
    found.lab.down()
    assert as_found.up(found.lab, load_site(found.site)) is True
    assert as_found.up(found.lab, load_site(found.site)) is False  # already up as found
    for node in NODES:
        assert inspect(found, node, CONTAINER)["State"]["Running"] is True
    status, _metrics = http_get(found.lab.port("spark1") + METRICS_OFFSET, "/metrics")
    assert status == 200
