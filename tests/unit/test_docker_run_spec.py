"""`run_spec`: the `docker run` options read back from `docker inspect`, on real samples
(tests/fixtures/real/, hand verdicts below) and on the lab's own documents."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from sparkbase.facts.parsers.docker_run import DEFAULT_SHM_SIZE, NotReproducible, RunSpec, run_spec

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
HOST_NETWORK = "docker_inspect_CONTAINER__docker24_host_network_bind_mount_full__home-assistant-chat.txt"
BRIDGE = "docker_inspect_CONTAINER__docker27_nginx_bridge_cgroupv2_overlay2_full__osboxes-notes.txt"


def real(name: str) -> dict[str, Any]:
    documents: list[dict[str, Any]] = json.loads((REAL / name).read_text())
    return documents[0]


def as_built(container: dict[str, Any]) -> dict[str, Any]:
    """The image as the container shows it was built (its entrypoint, directory, env, command
    and labels): the samples give no `docker image inspect` of their image."""
    keys = ("Entrypoint", "WorkingDir", "User", "Env", "Cmd", "Labels")
    return {"Config": {key: copy.deepcopy(container["Config"].get(key)) for key in keys}}


def test_a_host_network_container_with_a_bind_mount_is_given_again() -> None:
    """docker24 home-assistant: `--network host -v /root/.homeassistant:/config`, nothing else
    (CgroupnsMode host, a console size and the default masked paths are Docker's own)."""
    container = real(HOST_NETWORK)
    spec = run_spec(container, as_built(container))
    assert spec.network == "host" and spec.binds == ("/root/.homeassistant:/config",)
    assert spec.ipc == "private" and not spec.gpus_all and spec.shm_size is None and spec.cpuset == ""


def test_a_bridge_container_with_docker_defaults_only_is_given_again() -> None:
    """docker27 nginx on the default bridge: no option of the operator's but the network."""
    container = real(BRIDGE)
    spec = run_spec(container, as_built(container))
    assert spec.network == "bridge" and spec.binds == () and spec.labels == ()


def test_a_published_port_and_a_named_volume_are_refused_by_name() -> None:
    """mongo with `-p 27017:27017 -v mongo-data:/data/db`: neither is given again."""
    container = real("docker_inspect__mongo_running_named_volume_containerd_store_2026__lemoncode-notes.json")
    with pytest.raises(NotReproducible) as raised:
        run_spec(container, as_built(container))
    fields = raised.value.fields
    assert any(f.startswith("HostConfig.Binds: mongo-data:/data/db (a named volume)") for f in fields)
    assert any(f.startswith("HostConfig.PortBindings = {'27017/tcp'") for f in fields)
    assert len(fields) == 2


def test_the_env_given_is_what_the_image_does_not_set_itself() -> None:
    """mongo's own image env (PATH … GLIBC_TUNABLES as its Dockerfile sets them) is left to the
    image; an entry the operator changed is given again."""
    container = real("docker_inspect__mongo_running_named_volume_containerd_store_2026__lemoncode-notes.json")
    container["HostConfig"]["PortBindings"] = {}
    container["HostConfig"]["Binds"] = []
    image_env = [e for e in container["Config"]["Env"] if not e.startswith("HOME=")] + ["HOME=/root"]
    image = as_built(container)
    image["Config"]["Env"] = image_env
    spec = run_spec(container, image)
    assert spec.env == ("HOME=/data/db",)
    assert spec.command is None  # the image's own command
    image["Config"]["Cmd"] = ["mongod", "--auth"]  # a container given a command of its own
    assert run_spec(container, image).command == ("mongod",)


def lab_document(**record_changes: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A container of the lab's docker stand-in as the as-found lab runs it, and its image."""
    from sparkbase_lab.shims import docker_images, docker_state

    image = copy.deepcopy(docker_images.find(docker_images.PRODUCTION_REFERENCE))
    assert image is not None
    image["tags"] = []
    record: dict[str, Any] = {
        "id": "a" * 64, "name": "dsv41-flash", "created": docker_state.ZERO_TIME,
        "image_ref": docker_images.PRODUCTION_REFERENCE, "image_id": image["id"],
        "path": "python3", "args": ["-m", "sglang.launch_server", "--node-rank", "1"],
        "cmd": ["python3", "-m", "sglang.launch_server", "--node-rank", "1"], "entrypoint": None,
        "env": [*image["env"], "NCCL_IB_MERGE_NICS=0", "NCCL_IB_GID_INDEX=3"],
        "labels": dict(image["labels"]),
        "binds": ["/opt/nccl-site/lib/libnccl.so.2.27.7:/usr/lib/libnccl.so.2:ro", "/srv/hf:/srv/hf"],
        "network": "host", "ipc": "host", "cpuset": "0-9", "gpus": True, "restart": "unless-stopped",
        "hostname": "spark2", "sandbox": "b" * 64, "endpoint": "c" * 64, "layer": "d" * 64,
        "stopped_by_user": False,
        "state": {"status": "running", "pid": 1, "start": 0, "workers": [], "exit_code": 0,
                  "started_at": docker_state.ZERO_TIME, "finished_at": docker_state.ZERO_TIME},
    }
    record.update(record_changes)
    return docker_state.container_document(record, image), docker_state.image_document(image)


def test_the_as_found_lanes_container_is_run_again_with_its_options_on_another_image() -> None:
    container, image = lab_document()
    spec = run_spec(container, image)
    argv = spec.argv("dsv41-flash", "repo@sha256:" + "e" * 64, {"sparkbase.qualify.holds": "a" * 64})
    assert argv == [
        "docker", "run", "-d", "--name", "dsv41-flash", "--restart", "no", "--network", "host",
        "--ipc", "host", "--gpus", "all", "--cpuset-cpus", "0-9",
        "-v", "/opt/nccl-site/lib/libnccl.so.2.27.7:/usr/lib/libnccl.so.2:ro", "-v", "/srv/hf:/srv/hf",
        "-e", "NCCL_IB_MERGE_NICS=0", "-e", "NCCL_IB_GID_INDEX=3",
        "--label", "sparkbase.qualify.holds=" + "a" * 64,
        "repo@sha256:" + "e" * 64, "python3", "-m", "sglang.launch_server", "--node-rank", "1"]


@pytest.mark.parametrize(("change", "named"), [
    ({"Privileged": True}, "HostConfig.Privileged = True"),
    ({"Runtime": "nvidia"}, "HostConfig.Runtime = 'nvidia'"),
    ({"CapAdd": ["SYS_ADMIN"]}, "HostConfig.CapAdd = ['SYS_ADMIN']"),
    ({"Memory": 8 << 30}, "HostConfig.Memory = 8589934592"),
    ({"Mounts": [{"Type": "bind", "Source": "/a", "Target": "/b"}]}, "HostConfig.Mounts = "),
    ({"DeviceRequests": [{"Driver": "", "Count": 0, "DeviceIDs": ["0"], "Capabilities": [["gpu"]],
                          "Options": {}}]}, "HostConfig.DeviceRequests = "),
    ({"NetworkMode": "container:abc"}, "HostConfig.NetworkMode = 'container:abc'"),
    ({"Ulimits": [{"Name": "memlock", "Hard": -1, "Soft": -1}]}, "HostConfig.Ulimits = "),
])
def test_an_option_not_given_again_is_refused_by_name(change: dict[str, Any], named: str) -> None:
    container, image = lab_document()
    container["HostConfig"].update(change)
    with pytest.raises(NotReproducible) as raised:
        run_spec(container, image)
    assert [f for f in raised.value.fields if f.startswith(named)], raised.value.fields


def test_a_larger_shm_and_an_own_entrypoint() -> None:
    container, image = lab_document()
    container["HostConfig"]["ShmSize"] = 32 << 30
    assert run_spec(container, image).shm_size == 32 << 30
    container["HostConfig"]["ShmSize"] = DEFAULT_SHM_SIZE
    assert run_spec(container, image).shm_size is None
    container["Config"]["Entrypoint"] = ["/bin/sh", "-c"]
    with pytest.raises(NotReproducible, match=r"Config.Entrypoint = \['/bin/sh', '-c'\] \(not the image's\)"):
        run_spec(container, image)


def test_the_restart_policy_is_never_given_again() -> None:
    container, image = lab_document()
    spec: RunSpec = run_spec(container, image)
    argv = spec.argv("x", "i@sha256:" + "0" * 64, {})
    assert argv[argv.index("--restart") + 1] == "no" and "unless-stopped" not in argv
