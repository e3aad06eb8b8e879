"""The lab's `docker` stand-in prints what real Docker prints: its JSON documents are compared
with the real samples in tests/fixtures/real/ (key order, nesting, value types, text layout).
No node needed: these are the pure parts of shims/cmd_docker.py, docker_state.py,
docker_runtime.py and docker_images.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sparkbase.transport.targets import LAB_METRICS_PORT_OFFSET
from sparkbase_lab.shims import (
    cmd_docker,
    cmd_serving,
    docker_images,
    docker_runtime,
    docker_show,
    docker_state,
)
from sparkbase_lab.shims.common import Fail

REAL = Path(__file__).parent.parent / "fixtures" / "real"
CONTAINER_27 = "docker_inspect_CONTAINER__docker27_nginx_bridge_cgroupv2_overlay2_full__osboxes-notes.txt"
CONTAINER_HOST = "docker_inspect_CONTAINER__docker24_host_network_bind_mount_full__home-assistant-chat.txt"
IMAGE_27 = "docker_image_inspect__docker27_nginx_buildkit_no_ContainerConfig__ubuntu2204-notes.txt"
IMAGE_ARM64 = "docker_image_inspect__docker25_busybox_arm64_variant_v8__securite-notes.txt"
MOUNTS_RO = "docker_inspect_Mounts__bind_ro_Mode_ro_RW_false_grep-A10__kong-docs.txt"
PS_DOCS = "docker_ps_--format_json__docs_example_nginx__docker-cli-docs.txt"
PS_TWO = "docker_container_ls_--format_json_dot__two_lines_ipv6_ports_size_virtual_2025__es-docker-notes.txt"
MODELS = "v1_models__sglang_Kimi-K2.6_compact__serving-notes.json"
RUN_FLAGS, RUN_BOOLS = cmd_docker.RUN_VALUE_FLAGS, cmd_docker.RUN_BOOL_FLAGS
NCCL_BIND = "/opt/nccl-site/lib/libnccl.so.2.27.7:" + docker_images.TORCH_NCCL_PATH + ":ro"


def _real(name: str) -> Any:
    return json.loads((REAL / name).read_text())


def _record(**changes: Any) -> dict[str, Any]:
    """A running host-network container as `docker run` records it."""
    record: dict[str, Any] = {
        "id": "ab" * 32, "name": "dsv41-flash", "created": "2026-10-02T08:00:01.5Z",
        "image_ref": docker_images.PRODUCTION_REFERENCE, "image_id": _image()["id"],
        "path": "python3", "args": ["-m", "sglang.launch_server", "--model-path", "m"],
        "cmd": ["python3", "-m", "sglang.launch_server", "--model-path", "m"], "entrypoint": None,
        "env": ["PATH=/usr/bin", "NCCL_IB_MERGE_NICS=0"],
        "binds": [NCCL_BIND, "/root/.cache/hf:/root/.cache/hf"],
        "network": "host", "ipc": "host", "cpuset": "5-9,15-19", "gpus": True, "restart": "unless-stopped",
        "hostname": "spark1", "sandbox": "cd" * 32, "endpoint": "ef" * 32, "layer": "01" * 32,
        "stopped_by_user": False,
        "state": {"status": "running", "pid": 4242, "start": 99, "workers": [4250], "exit_code": 0,
                  "started_at": "2026-10-02T08:00:02.25Z", "finished_at": docker_state.ZERO_TIME},
    }
    record.update(changes)
    return record


def _image() -> dict[str, Any]:
    image = dict(docker_images.CATALOGUE[0])
    image["tags"] = []
    return image


def _shape(value: Any) -> Any:
    """Keys in order (mappings), element shapes (lists), type names (scalars)."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape(item) for item in value[:1]]
    return type(value).__name__


def _same_types(ours: Any, real: Any, where: str = "") -> list[str]:
    """Where a value of ours has another JSON type than the real sample's (null in either
    is left alone: Docker prints null for an empty list or map)."""
    if ours is None or real is None:
        return []
    if isinstance(real, dict):
        if not isinstance(ours, dict):
            return [f"{where}: {type(ours).__name__}, real {type(real).__name__}"]
        return [p for key in real.keys() & ours.keys()
                for p in _same_types(ours[key], real[key], f"{where}.{key}")]
    if isinstance(real, list):
        if not isinstance(ours, list):
            return [f"{where}: {type(ours).__name__}, real list"]
        return [p for item in ours[:1] for sample in real[:1]
                for p in _same_types(item, sample, where + "[]")]
    if isinstance(real, bool) != isinstance(ours, bool) or type(ours) is not type(real):
        return [f"{where}: {type(ours).__name__}, real {type(real).__name__}"]
    return []


# --- docker inspect CONTAINER --------------------------------------------------------------

def test_container_document_has_docker_27s_fields_in_docker_27s_order() -> None:
    real = _real(CONTAINER_27)[0]
    ours = docker_state.container_document(_record(), _image())
    assert list(ours) == list(real)
    assert list(ours["State"]) == list(real["State"])
    assert list(ours["HostConfig"]) == list(real["HostConfig"])
    assert list(ours["HostConfig"]["LogConfig"]) == list(real["HostConfig"]["LogConfig"])
    assert list(ours["HostConfig"]["RestartPolicy"]) == list(real["HostConfig"]["RestartPolicy"])
    assert list(ours["GraphDriver"]) == list(real["GraphDriver"])
    assert list(ours["GraphDriver"]["Data"]) == list(real["GraphDriver"]["Data"])
    assert list(ours["Config"]) == list(real["Config"])
    assert list(ours["NetworkSettings"]) == list(real["NetworkSettings"])
    endpoint = real["NetworkSettings"]["Networks"]["bridge"]
    assert list(ours["NetworkSettings"]["Networks"]["host"]) == list(endpoint)
    assert _same_types(ours, real) == []


def test_a_host_network_container_with_binds_reads_as_the_real_one() -> None:
    real = _real(CONTAINER_HOST)[0]
    ours = docker_state.container_document(_record(), _image())
    assert ours["HostConfig"]["NetworkMode"] == real["HostConfig"]["NetworkMode"] == "host"
    assert ours["NetworkSettings"]["SandboxKey"] == real["NetworkSettings"]["SandboxKey"]
    assert list(ours["NetworkSettings"]["Networks"]) == list(real["NetworkSettings"]["Networks"]) == ["host"]
    ids = ("NetworkID", "EndpointID")
    ours_host = {k: v for k, v in ours["NetworkSettings"]["Networks"]["host"].items() if k not in ids}
    real_host = {k: v for k, v in real["NetworkSettings"]["Networks"]["host"].items() if k not in ids}
    assert ours_host == real_host | {"DNSNames": None}  # Docker 25+ adds DNSNames
    assert ours["HostConfig"]["Binds"] == [NCCL_BIND, "/root/.cache/hf:/root/.cache/hf"]
    rw = ours["Mounts"][1]
    assert list(rw) == list(real["Mounts"][0])
    assert (rw["Type"], rw["Mode"], rw["RW"], rw["Propagation"]) == ("bind", "", True, "rprivate")
    assert _same_types(ours, real) == []


def test_a_read_only_bind_is_mode_ro_rw_false_as_docker_prints_it() -> None:
    text = (REAL / MOUNTS_RO).read_text()
    fields = dict(re.findall(r'"(\w+)": ("[^"]*"|true|false)', text.split("},")[0]))
    ours = docker_state.container_document(_record(), _image())["Mounts"][0]
    assert list(ours) == list(fields)
    assert (ours["Mode"], ours["RW"], ours["Propagation"]) == ("ro", False, "rprivate")
    assert (fields["Mode"], fields["RW"]) == ('"ro"', "false")
    assert ours["Source"] == "/opt/nccl-site/lib/libnccl.so.2.27.7"
    assert ours["Destination"] == docker_images.TORCH_NCCL_PATH


def test_container_state_and_names_follow_the_record() -> None:
    ours = docker_state.container_document(_record(), _image())
    assert ours["Name"] == "/dsv41-flash" and ours["Id"] == "ab" * 32
    assert ours["Image"].startswith("sha256:") and len(ours["Image"]) == 71
    assert ours["Config"]["Image"] == docker_images.PRODUCTION_REFERENCE
    assert (ours["Path"], ours["Args"][:2]) == ("python3", ["-m", "sglang.launch_server"])
    assert ours["State"]["Pid"] == 4242 and ours["State"]["Running"] is True
    assert ours["HostConfig"]["CpusetCpus"] == "5-9,15-19"
    assert ours["HostConfig"]["IpcMode"] == "host"
    assert ours["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert ours["HostConfig"]["DeviceRequests"][0]["Capabilities"] == [["gpu"]]
    exited = _record(state={"status": "exited", "pid": 0, "start": 0, "workers": [], "exit_code": 137,
                            "started_at": "2026-10-02T08:00:02Z", "finished_at": "2026-10-02T09:00:00Z"})
    stopped = docker_state.container_document(exited, _image())
    assert stopped["State"]["Status"] == "exited" and stopped["State"]["Pid"] == 0
    assert stopped["State"]["ExitCode"] == 137 and stopped["NetworkSettings"]["SandboxKey"] == ""


@pytest.mark.parametrize("name", [CONTAINER_27, CONTAINER_HOST, IMAGE_27, IMAGE_ARM64])
def test_inspect_text_is_laid_out_as_docker_prints_it(name: str) -> None:
    """go_json (what the stand-in prints) writes each real sample back byte for byte."""
    text = (REAL / name).read_text()
    if "<" not in text:
        assert docker_state.go_json(json.loads(text)) + "\n" == text


def test_go_json_escapes_what_go_escapes() -> None:
    assert docker_state.go_json({"a": "<b> & …"}, indent=None) == '{"a":"\\u003cb\\u003e \\u0026 …"}'


# --- docker image inspect ------------------------------------------------------------------

def test_image_document_is_docker_26_27s() -> None:
    real, arm64 = _real(IMAGE_27)[0], _real(IMAGE_ARM64)[0]
    ours = docker_state.image_document(_image())
    expected = list(real)
    expected.insert(expected.index("Architecture") + 1, "Variant")  # arm64 images carry one
    assert list(ours) == expected
    assert [k for k in arm64 if k != "ContainerConfig"] == list(ours)
    assert (ours["Architecture"], ours["Variant"]) == (arm64["Architecture"], arm64["Variant"])
    assert list(ours["Config"]) == [k for k in real["Config"] if k not in ("ExposedPorts", "StopSignal")]
    assert list(ours["RootFS"]) == list(real["RootFS"]) and list(ours["Metadata"]) == list(real["Metadata"])
    assert _same_types(ours, real) == []


def test_an_image_pulled_by_digest_has_a_repo_digest_and_no_tag() -> None:
    ours = docker_state.image_document(_image())
    assert ours["RepoTags"] == []
    assert ours["RepoDigests"] == [docker_images.PRODUCTION_REFERENCE]
    tagged = dict(docker_images.CATALOGUE[2], tags=["r39-glm53"])
    assert docker_state.image_document(tagged)["RepoTags"] == ["jovian-judgement:r39-glm53"]


def test_the_production_digest_keeps_the_notes_prefix() -> None:
    assert re.fullmatch(r"sha256:f617afd8[0-9a-f]{56}", docker_images.PRODUCTION_DIGEST)
    assert docker_images.NEXT_DIGEST != docker_images.PRODUCTION_DIGEST
    for image in docker_images.CATALOGUE:
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", image["id"])
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", image["digest"])


@pytest.mark.parametrize(("reference", "index"), [
    (docker_images.PRODUCTION_REFERENCE, 0),
    (f"docker.io/{docker_images.PRODUCTION_REFERENCE}", 0),
    (docker_images.NEXT_REFERENCE, 1),
    ("jovian-judgement:r39-glm53", 2),
    ("jovian-judgement", None),
    (f"{docker_images.PRODUCTION_REPOSITORY}@sha256:" + "0" * 64, None),
])
def test_catalogue_references(reference: str, index: int | None) -> None:
    found = docker_images.find(reference)
    assert found is (None if index is None else docker_images.CATALOGUE[index])


# --- docker ps --------------------------------------------------------------------------------

def test_ps_json_row_has_the_real_keys_all_strings() -> None:
    real = json.loads((REAL / PS_DOCS).read_text())
    now = docker_state.parse_rfc3339("2026-10-02T08:19:30Z")
    row = docker_show.ps_row(_record(), now)
    assert sorted(row) == sorted(real)
    assert all(isinstance(v, str) for v in row.values())
    assert row["Command"] == '"python3 -m sglang.l…"'
    assert row["RunningFor"] == "19 minutes ago" and row["Status"] == "Up 19 minutes"
    assert row["CreatedAt"] == "2026-10-02 08:00:01 +0000 UTC"
    assert row["Mounts"] == "/opt/nccl-site…,/root/.cache/hf"
    assert (row["Networks"], row["Ports"], row["State"], row["ID"]) == ("host", "", "running", "ab" * 6)
    assert row["Image"] == docker_images.PRODUCTION_REPOSITORY  # the digest only with --no-trunc
    assert docker_show.ps_row(_record(), now, no_trunc=True)["Image"] == docker_images.PRODUCTION_REFERENCE
    for line in (REAL / PS_TWO).read_text().splitlines():
        assert docker_state.go_json(json.loads(line), indent=None) == line


def test_ps_command_is_shortened_as_docker_shortens_it() -> None:
    """Docker keeps 19 characters and an ellipsis inside the quotes (real samples)."""
    for line in (REAL / PS_TWO).read_text().splitlines() + (REAL / PS_DOCS).read_text().splitlines():
        command = json.loads(line)["Command"]
        assert len(command.strip('"')) == 20 and command.endswith('…"')


@pytest.mark.parametrize(("seconds", "text"), [
    (0.5, "Less than a second"), (1, "1 second"), (59, "59 seconds"), (60, "About a minute"),
    (119, "About a minute"), (120, "2 minutes"), (3599, "59 minutes"), (3600, "About an hour"),
    (5400, "2 hours"), (47 * 3600, "47 hours"), (48 * 3600, "2 days"), (15 * 86400, "2 weeks"),
])
def test_human_duration_is_go_units(seconds: float, text: str) -> None:
    assert docker_show._human_duration(seconds) == text


def test_the_ps_table_is_laid_out_as_docker_s_tabwriter() -> None:
    headers = ["CONTAINER ID", "IMAGE", "COMMAND", "CREATED", "STATUS", "PORTS", "NAMES"]
    header = docker_show.table(headers, [])
    assert header == "CONTAINER ID   IMAGE     COMMAND   CREATED   STATUS    PORTS     NAMES"


# --- --format templates ------------------------------------------------------------------------

def test_format_templates_print_as_go_templates() -> None:
    document = docker_state.container_document(_record(), _image())
    assert docker_show.render_format("{{.State.Pid}}", document) == "4242"
    assert docker_show.render_format("{{ .State.Running }} {{.Name}}", document) == "true /dsv41-flash"
    env = json.loads(docker_show.render_format("{{json .Config.Env}}", document))
    assert env == ["PATH=/usr/bin", "NCCL_IB_MERGE_NICS=0"]
    assert docker_show.render_format("{{.Config.Entrypoint}}", document) == "<nil>"
    with pytest.raises(Fail):
        docker_show.render_format("{{range .Mounts}}{{.Source}}{{end}}", document)
    with pytest.raises(Fail, match="map has no entry"):
        docker_show.render_format("{{.Nope}}", document)


# --- run options, environment ------------------------------------------------------------------

def test_run_options_stop_at_the_image() -> None:
    argv = ["-d", "--name", "x", "--network=host", "-e", "A=1", "-v", "/a:/b:ro", "img", "-e", "B=2"]
    flags, rest = docker_show.parse_options(argv, RUN_FLAGS, RUN_BOOLS, "run")
    assert flags == {"detach": ["true"], "name": ["x"], "network": ["host"], "env": ["A=1"],
                     "volume": ["/a:/b:ro"]}
    assert rest == ["img", "-e", "B=2"]
    with pytest.raises(Fail, match="unknown flag: --nope") as caught:
        docker_show.parse_options(["--nope", "img"], RUN_FLAGS, RUN_BOOLS, "run")
    assert caught.value.status == 125


def test_minus_e_replaces_the_image_value_in_place_and_appends_new_keys() -> None:
    env = cmd_docker._environment(["B=9", "C=3"], ["A=1", "B=2"])
    assert env == ["A=1", "B=9", "C=3"]


def test_the_process_environment_is_dockers() -> None:
    record = _record(env=["PATH=/usr/bin", "X=1"])
    env = docker_runtime.process_env(record)
    build = docker_images.build_of(record["image_id"])
    assert list(env.items()) == [("HOSTNAME", "spark1"), ("PATH", "/usr/bin"), ("X", "1"), ("HOME", "/root"),
                                 ("SPARKBASE_LAB_BUILD", build)]  # the lab's engine build: the image's
    assert build == "image-" + docker_images.PRODUCTION_DIGEST[7:19]
    assert docker_runtime.process_env(_record(env=["SPARKBASE_LAB_BUILD=x"]))["SPARKBASE_LAB_BUILD"] == "x"


def test_the_cgroup_is_dockers_systemd_driver_scope() -> None:
    real = (REAL / "proc_PID_cgroup__docker_cgroupv2_systemd_driver_host_view__procs-236.txt").read_text()
    pattern = r"0::/system\.slice/docker-[0-9a-f]{64}\.scope"
    assert re.fullmatch(pattern, real.strip())
    assert re.fullmatch(pattern, "0::" + docker_runtime.cgroup_path("ab" * 32))


def test_only_sglang_rank_0_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docker_runtime, "node_info", lambda: {"name": "spark2", "port": 2202})
    assert docker_runtime._listen_port(["python3", "--node-rank", "1"]) is None
    assert docker_runtime._listen_port(["python3", "--node-rank", "0"]) == 2202 + LAB_METRICS_PORT_OFFSET
    assert docker_runtime._listen_port(["vllm", "serve", "m"]) == 2202 + LAB_METRICS_PORT_OFFSET


def test_the_metrics_offset_is_the_products() -> None:
    assert docker_runtime.METRICS_PORT_OFFSET == LAB_METRICS_PORT_OFFSET


# --- the stand-in's OpenAI-compatible API ------------------------------------------------------

def test_v1_models_is_sglangs() -> None:
    real = (REAL / MODELS).read_text().strip()
    ours = cmd_serving.models_json(["-m", "sglang.launch_server", "--model-path", "deepseek-ai/X"], "sglang")
    assert _shape(json.loads(ours)) == _shape(json.loads(real))
    assert re.sub(r'"created":\d+', "", ours).count(",") == re.sub(r'"created":\d+', "", real).count(",")
    card = json.loads(ours)["data"][0]
    assert (card["id"], card["root"], card["owned_by"]) == ("deepseek-ai/X", "deepseek-ai/X", "sglang")
    assert " " not in ours
