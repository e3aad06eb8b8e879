"""Lanes run as containers: image references, Docker's answers read back from the runtime
section (real `docker inspect` samples), the probe's docker commands run by sh against a
`docker` that records what it was asked, and the `runtime.container` / `runtime.running`
checks of a container lane."""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_runtime import hexed, probe, section

from sparkbase.audit.runtime import LaneProbe, runtime_results
from sparkbase.facts.parsers.docker import Container, container_id, parse_container_inspect, split_answer
from sparkbase.facts.runtime import (
    CONTAINER_ID_PATTERN,
    RuntimeFacts,
    docker_command,
    read_runtime,
)
from sparkbase.model.images import canonical_repository, parse_reference, pinned_reference
from sparkbase.policy.images import pin_problem

REAL = Path(__file__).parents[1] / "fixtures" / "real"
MONGO = next(REAL.glob("docker_inspect__mongo_running_*")).read_text()
IMAGE = next(REAL.glob("docker_image_inspect__ghcr_metrics_*")).read_text()
MONGO_ID = "c30620ffe479c4df6502fe8a3962d9fc0ca2a9293a918095b4a910bb8d57a90a"
MONGO_IMAGE = "sha256:5d7043a4ffe02b9ed1b6e0bab057546981af5ca0a79107e9c461e49bc44c0a7b"
CGROUP_SAMPLES = sorted(REAL.glob("proc_*cgroup__*"))

REPO = "aidendle94/sparkrun-sglang-dsv41-gb10"
PIN = "sha256:f617afd8" + "0" * 56
OTHER = "sha256:aaaaaaaa" + "1" * 56
PINNED_REF = f"{REPO}@{PIN}"


# --- references --------------------------------------------------------------------------

REFERENCES = {  # text -> (name, tag, digest, repository in full)
    "nginx": ("nginx", None, None, "docker.io/library/nginx"),
    "mongo:latest": ("mongo", "latest", None, "docker.io/library/mongo"),
    PINNED_REF: (REPO, None, PIN, f"docker.io/{REPO}"),
    f"{REPO}:dev@{PIN}": (REPO, "dev", PIN, f"docker.io/{REPO}"),
    "ghcr.io/lowlighter/metrics:v3": ("ghcr.io/lowlighter/metrics", "v3", None, "ghcr.io/lowlighter/metrics"),
    "localhost:5000/lane/x:1": ("localhost:5000/lane/x", "1", None, "localhost:5000/lane/x"),
    "docker.io/library/nginx": ("docker.io/library/nginx", None, None, "docker.io/library/nginx"),
}


@pytest.mark.parametrize("text", REFERENCES)
def test_references_split_as_docker_splits_them(text: str) -> None:
    ref = parse_reference(text)
    assert (ref.name, ref.tag, ref.digest, ref.repository) == REFERENCES[text]
    assert str(ref) == text


@pytest.mark.parametrize(("text", "words"), [
    ("jovian-judgement:r39-glm53", "is not pinned by digest"),
    (f"{REPO}@sha256:f617afd8", "is not a digest"),
    (f"{REPO}@sha512:{'a' * 128}", "the digest must be sha256:"),
    (f"Aidendle94/x@{PIN}", "is not a repository"),
    (f"{REPO}:@{PIN}", "is not a tag"),
    ("", "is not an image reference"),
])
def test_a_reference_not_pinned_by_digest_is_refused_saying_why(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        pinned_reference(text)


def test_docker_hub_names_are_one_repository() -> None:
    assert {canonical_repository(n) for n in ("nginx", "library/nginx", "docker.io/library/nginx",
                                              "index.docker.io/library/nginx")} == {"docker.io/library/nginx"}
    assert canonical_repository("aidendle94/x") == "docker.io/aidendle94/x"


# --- the pinned image rule ---------------------------------------------------------------

def _container(**changes: Any) -> Container:
    (mongo,) = parse_container_inspect(MONGO)
    return replace(mongo, name="dsv41-flash", **changes)


PIN_CASES = {  # container fields -> the problem (None: it runs the pinned image)
    "RepoDigests hold the pin": ({"repo_digests": (PINNED_REF,)}, None),
    "RepoDigests name it with docker.io in full": ({"repo_digests": (f"docker.io/{PINNED_REF}",)}, None),
    "created from the pinned reference, RepoDigests unread": ({"image_ref": f"{REPO}:dev@{PIN}"}, None),
    "another digest of the repository": (
        {"repo_digests": (f"{REPO}@{OTHER}",), "image_ref": f"{REPO}:dev"},
        "container dsv41-flash runs sha256:aaaaaaaa…, lane pins sha256:f617afd8…"),
    "the pinned digest under another repository": (
        {"repo_digests": (f"someone/else@{PIN}",)},
        f"container dsv41-flash runs {PIN}, lane pins {PIN}"),
    "a tag, no digest anywhere": (
        {"repo_digests": (), "image_ref": "mongo:latest"},
        "container dsv41-flash runs image sha256:5d7043a4… (no RepoDigests, not created from a digest), "
        "lane pins sha256:f617afd8…"),
}


@pytest.mark.parametrize(("changes", "problem"), PIN_CASES.values(), ids=PIN_CASES.keys())
def test_the_container_runs_the_pinned_image(changes: dict[str, Any], problem: str | None) -> None:
    assert pin_problem(_container(**changes), pinned_reference(PINNED_REF)) == problem


# --- docker's answers ----------------------------------------------------------------------

def test_the_cli_answer_is_split_into_the_array_and_its_messages() -> None:
    text, notes = split_answer(f"WARNING: config unreadable\n{MONGO}Error: No such object: dsv41-flash\n")
    assert text is not None and json.loads(text)[0]["Id"] == MONGO_ID
    assert notes == ("WARNING: config unreadable", "Error: No such object: dsv41-flash")
    assert split_answer("sh: 1: docker: not found\n") == (None, ("sh: 1: docker: not found",))
    assert split_answer("[]\nError: No such object: x\n") == ("[]", ("Error: No such object: x",))


def tool(kind: str, text: str, status: int = 0) -> str:
    return f"@tool docker {kind}\n{hexed(text)}\n@rc {status}\n"


def in_container(pid: int, cid: str = MONGO_ID) -> str:
    """A serving process whose cgroup is Docker's scope of container `cid` (systemd driver)."""
    return section(pid=pid, cgroup=f"0::/system.slice/docker-{cid}.scope\n")


def image_of(image_id: str, digests: list[str]) -> str:
    """The real image sample, given the container's image id and `digests` (a test's image)."""
    data = json.loads(IMAGE)
    data[0].update(Id=image_id, RepoDigests=digests)
    return json.dumps(data, indent=4)


#: the images answer: the container's image, pulled by the pinned digest
PINNED_IMAGE = tool("images", image_of(MONGO_IMAGE, [PINNED_REF]))


def test_docker_answers_read_back_with_the_images_digests() -> None:
    text = in_container(42) + tool("containers", MONGO) + tool("images", image_of(MONGO_IMAGE, [PINNED_REF]))
    runtime = read_runtime(text, ["mongodb"])
    assert [p.container_id for p in runtime.processes] == [MONGO_ID]
    assert runtime.containers[MONGO_ID].repo_digests == (PINNED_REF,)
    assert runtime.container_errors == {}


def test_docker_not_found_is_said_for_every_container_asked() -> None:
    text = in_container(42) + tool("containers", "sh: 1: docker: not found\n", 127)
    runtime = read_runtime(text, ["dsv41-flash"])
    assert runtime.containers == {}
    assert runtime.container_errors == {MONGO_ID: "docker not found", "dsv41-flash": "docker not found"}


def test_a_name_docker_does_not_know_and_an_image_it_does_not_show() -> None:
    answer = MONGO + "Error: No such object: dsv41-flash\n"
    text = in_container(42) + tool("containers", answer, 1) + tool("images", IMAGE)  # another image's id
    runtime = read_runtime(text, ["dsv41-flash"])
    assert list(runtime.containers) == [MONGO_ID]
    assert runtime.container_errors == {"dsv41-flash": "no such container",
                                        MONGO_IMAGE: "docker image inspect did not show it (removed?)"}


def test_a_daemon_that_does_not_answer_and_an_answer_cut_short() -> None:
    down = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the daemon running?\n"
    runtime = read_runtime(tool("containers", down, 1), ["dsv41-flash"])
    assert runtime.container_errors["dsv41-flash"].startswith("docker inspect exit 1: Cannot connect")
    cut = read_runtime(tool("containers", MONGO[:4000]), ["dsv41-flash"])
    assert cut.container_errors["dsv41-flash"].startswith("docker inspect printed no whole JSON array")


# --- the probe's docker commands, run by sh -------------------------------------------------

#: a `docker` that records each call's arguments and answers from files named by the call
FAKE_DOCKER = """#!/bin/sh
printf '%s\\n' "$*" >> "$DOCKER_LOG"
case "$1" in
  inspect) shift; cat "$DOCKER_DIR/containers.json"; for n in "$@"; do
             [ "$n" = mongodb ] || { echo "Error: No such object: $n" >&2; exit 1; }; done ;;
  image) cat "$DOCKER_DIR/images.json" ;;
esac
"""


def _run_docker_part(tmp_path: Path, names: list[str], with_docker: bool) -> tuple[RuntimeFacts, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if with_docker:
        (bin_dir / "docker").write_text(FAKE_DOCKER)
        (bin_dir / "docker").chmod(0o755)
    (tmp_path / "containers.json").write_text(MONGO)
    (tmp_path / "images.json").write_text(image_of(MONGO_IMAGE, [PINNED_REF]))
    log = tmp_path / "docker.log"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DOCKER_LOG": str(log), "DOCKER_DIR": str(tmp_path)}
    script = "P=; " + docker_command(names)  # no serving process: the names alone are asked
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30, env=env,
                          check=True)
    calls = log.read_text().splitlines() if log.exists() else []
    return read_runtime(done.stdout, names), calls


def test_the_probe_asks_docker_for_the_containers_then_their_images(tmp_path: Path) -> None:
    runtime, calls = _run_docker_part(tmp_path, ["mongodb"], with_docker=True)
    assert calls == ["inspect mongodb", f"image inspect {MONGO_IMAGE}"]
    assert runtime.containers[MONGO_ID].name == "mongodb"
    assert runtime.containers[MONGO_ID].repo_digests == (PINNED_REF,)


def test_the_probe_on_a_node_without_docker(tmp_path: Path) -> None:
    runtime, calls = _run_docker_part(tmp_path, ["dsv41-flash"], with_docker=False)
    assert calls == []
    assert runtime.container_errors == {"dsv41-flash": "docker not found"}


def test_a_hung_docker_costs_the_containers_not_the_read(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """dockerd hung: the docker CLI waits for it without end; the probe gives up on it after
    DOCKER_TIMEOUT and says so for each container asked (the section still ends)."""
    import sparkbase.facts.runtime as runtime_module

    monkeypatch.setattr(runtime_module, "DOCKER_TIMEOUT", 1)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text("#!/bin/sh\nexec sleep 60\n")
    (bin_dir / "docker").chmod(0o755)
    script = "P=; " + docker_command(["dsv41-flash"]) + "echo done >&2"
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, check=True)
    assert done.stderr.rstrip().endswith("done")
    assert read_runtime(done.stdout, ["dsv41-flash"]).container_errors == {
        "dsv41-flash": "docker inspect: docker did not answer within 1 s (is dockerd hung?)"}


def test_nothing_is_asked_of_docker_when_nothing_runs_in_a_container(tmp_path: Path) -> None:
    runtime, calls = _run_docker_part(tmp_path, [], with_docker=True)
    assert calls == [] and runtime.containers == {} and runtime.container_errors == {}


@pytest.mark.parametrize("sample", CGROUP_SAMPLES, ids=[p.name for p in CGROUP_SAMPLES])
def test_the_node_finds_the_container_ids_python_reads(sample: Path) -> None:
    """The probe's grep over /proc/PID/cgroup and `container_id` agree on every real form."""
    found = subprocess.run(["sh", "-c", f"grep -ohsE {shlex.quote(CONTAINER_ID_PATTERN)} \"$1\" "
                            "| grep -oE '[0-9a-f]{64}' | sort -u", "sh", str(sample)],
                           capture_output=True, text=True, check=False).stdout.split()
    expected = {container_id(line.split(":", 2)[2]) for line in sample.read_text().splitlines()}
    assert found == sorted(cid for cid in expected if cid is not None)


# --- the checks of a container lane --------------------------------------------------------

def lane(required: bool = False, match: tuple[str, ...] = ("sglang.launch_server", "X")) -> LaneProbe:
    return replace(probe("dsv", match), container="dsv41-flash", image=PINNED_REF, required=required)


def facts(text: str, names: tuple[str, ...] = ("dsv41-flash",)) -> Any:
    runtime = read_runtime(text, names)
    return SimpleNamespace(serving=runtime.processes, containers=runtime.containers,
                           container_errors=runtime.container_errors)


def named(container_json: str, name: str = "dsv41-flash", running: bool = True) -> str:
    data = json.loads(container_json)
    data[0]["Name"] = f"/{name}"
    data[0]["State"]["Running"] = running
    return json.dumps(data, indent=4)


def _results(text: str, probe_: LaneProbe | None = None) -> dict[str, Any]:
    return {r.id: r for r in runtime_results("spark1", [probe_ or lane()], facts(text))}


def test_a_container_lane_from_its_pinned_image_passes_and_says_where_it_runs() -> None:
    text = (in_container(42) + in_container(43) + tool("containers", named(MONGO))
            + tool("images", image_of(MONGO_IMAGE, [f"docker.io/{PINNED_REF}"])))
    results = _results(text)
    container = results["runtime.container.dsv"]
    assert container.status == "pass", container
    assert container.observed.startswith("pid 42, pid 43 in container dsv41-flash (c30620ffe479), "
                                         "image mongo:latest")
    assert PIN in container.observed
    assert "container dsv41-flash (c30620ffe479)" in results["runtime.running.dsv"].observed
    others = ("nccl_env", "nccl_library", "affinity")
    assert [results[f"runtime.{k}.dsv"].status for k in others] == ["pass"] * 3


def test_another_digest_fails_naming_node_container_and_both_digests() -> None:
    text = (in_container(42) + tool("containers", named(MONGO))
            + tool("images", image_of(MONGO_IMAGE, [f"{REPO}@{OTHER}"])))
    failed = _results(text)["runtime.container.dsv"]
    assert (failed.status, failed.node) == ("fail", "spark1")
    assert failed.observed == "container dsv41-flash runs sha256:aaaaaaaa…, lane pins sha256:f617afd8…"
    assert failed.blocking and PINNED_REF in failed.expected


def test_docker_missing_fails_a_container_lane_never_passes() -> None:
    failed = _results(in_container(42) + tool("containers", "sh: 1: docker: not found\n", 127))
    assert failed["runtime.container.dsv"].status == "fail"
    assert failed["runtime.container.dsv"].observed == "cannot read container dsv41-flash: docker not found"


def test_processes_in_another_container_or_in_none() -> None:
    other = "b508e2673897c4f521d858f56dab18e31ddbfc1f83300fb9793c8a4052af8f05"
    text = (in_container(42) + section(pid=43, cgroup="0::/system.slice/lane.service\n")
            + tool("containers", named(MONGO)) + tool("images", image_of(MONGO_IMAGE, [PINNED_REF])))
    observed = _results(text)["runtime.container.dsv"].observed
    assert "pid 43 outside any Docker container (not in container dsv41-flash)" in observed
    text = in_container(42) + in_container(44, other) + tool("containers", named(MONGO)) + PINNED_IMAGE
    observed = _results(text)["runtime.container.dsv"].observed
    assert f"pid 44 in container {other[:12]}, not in the lane's container dsv41-flash (c30620ffe479)" \
        in observed


def test_wrong_match_strings_fail_when_the_container_runs() -> None:
    """A lane whose match strings find nothing while its container runs is not idle."""
    wrong = lane(match=("sglang.launch_server", "NotTheModel"))
    text = in_container(42) + tool("containers", named(MONGO)) + PINNED_IMAGE
    running = _results(text, wrong)["runtime.running.dsv"]
    assert running.status == "fail"
    assert running.observed == ("container dsv41-flash is running but no process matches "
                                "sglang.launch_server NotTheModel")
    stopped = text.replace(tool("containers", named(MONGO)), tool("containers", named(MONGO, running=False)))
    assert _results(stopped, wrong)["runtime.running.dsv"].status == "skip"  # idle: nothing runs
    must = replace(wrong, required=True)
    assert _results(stopped, must)["runtime.running.dsv"].status == "fail"  # a lane that must serve


def test_the_container_lanes_names_go_to_the_node() -> None:
    from sparkbase.audit.runtime import container_names

    assert container_names([lane(), probe("glm", ("vllm",))]) == ("dsv41-flash",)
    assert "N=dsv41-flash; " in docker_command(["dsv41-flash"])


def test_preflight_says_where_a_container_lane_runs() -> None:
    from sparkbase.audit.run import AuditReport, NodeReport
    from sparkbase.gate.preflight import PreflightResult

    text = in_container(42) + tool("containers", named(MONGO)) + PINNED_IMAGE
    results = tuple(runtime_results("spark1", [lane()], facts(text)))
    node = NodeReport("spark1", "site-stock-6.17-4k", "1.2.0", True, None, results)
    verdict = PreflightResult("dsv", (), AuditReport("site", 0.0, 0.0, (node,), ()), 0.0)
    assert verdict.where_it_runs() == [
        f"spark1: pid 42 in container dsv41-flash (c30620ffe479), image mongo:latest ({PIN})"]


def test_lane_status_names_the_api_endpoint() -> None:
    from sparkbase.cli.lane import endpoint_line
    from sparkbase.model.site import load_site

    site = load_site(Path(__file__).parents[2])
    lane_ = site.lanes["dsv41-flash"]
    assert lane_.runtime is not None and endpoint_line(site, "dsv41-flash") is None
    runtime = lane_.runtime.model_copy(update={"endpoint": lane_.runtime.model_validate(
        {"match": ["x"], "unit": "x.service", "endpoint": {"node": "spark1", "port": 8000}}).endpoint})
    with_api = replace(site, lanes={"dsv41-flash": lane_.model_copy(update={"runtime": runtime})})

    def at(address: str | None) -> str | None:
        spark1 = site.inventory.nodes["spark1"].model_copy(update={"management_address": address})
        nodes = {**site.inventory.nodes, "spark1": spark1}
        return endpoint_line(replace(with_api, inventory=site.inventory.model_copy(update={"nodes": nodes})),
                             "dsv41-flash")

    assert at(None) == "API (openai): port 8000 on spark1 (the inventory gives no management_address)"
    assert at("10.69.43.170/24") == "API (openai): http://10.69.43.170:8000/v1 on spark1"
    assert at("fd00::5") == "API (openai): http://[fd00::5]:8000/v1 on spark1"
