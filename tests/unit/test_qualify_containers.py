"""The container restarter against a fake `docker` per node: the site's container is stopped
and kept (held under another name while another image runs), only sparkbase's labelled
container is removed, a container it cannot run again is refused before anything stops, and a
session cut short is put back."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

import pytest

from sparkbase.model.lanes import Lane
from sparkbase.qualify.restart import HOLDS_LABEL, ContainerRestarter, Ran, RestartError

NODES = ["spark1", "spark2"]
OLD, NEW = "sha256:" + "0" * 64, "sha256:" + "1" * 64
REPO = "aidendle94/sparkrun-sglang-dsv41-gb10"


def lane(digest: str) -> Lane:
    return Lane.model_validate({
        "model": "m", "engine": "sglang", "baseline": "b", "baseline_version": "1.0.0", "shape": "ring4",
        "nodes": NODES, "runtime": {"match": ["sglang"], "container": {"name": "dsv41-flash",
                                                                       "image": f"{REPO}@{digest}"}}})


def image_id(digest: str) -> str:
    return "sha256:" + ("a" if digest == OLD else "b") * 64


@dataclass
class FakeDocker:
    """One node's containers and images, answering the commands the restarter sends."""

    containers: dict[str, dict[str, Any]] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    made: int = 0

    def site_container(self, digest: str, **host: Any) -> None:
        self.containers["dsv41-flash"] = {
            "Id": "5" * 64, "Name": "/dsv41-flash", "Image": image_id(digest), "Running": True,
            "Config": {"Env": ["PATH=/usr/bin", "NCCL_IB_MERGE_NICS=0"], "Cmd": ["python3", "-m", "sglang"],
                       "Labels": {}, "Entrypoint": None, "Image": f"{REPO}@{digest}"},
            "HostConfig": {"NetworkMode": "host", "IpcMode": "host", "Binds": ["/opt/nccl:/nccl:ro"],
                           "RestartPolicy": {"Name": "unless-stopped"}, **host}}

    def image(self, ident: str) -> dict[str, Any]:
        digest = OLD if ident == image_id(OLD) or ident.endswith(OLD) else NEW
        return {"Id": image_id(digest), "RepoDigests": [f"{REPO}@{digest}"],
                "Config": {"Env": ["PATH=/usr/bin"], "Cmd": ["/bin/bash"], "Labels": {}, "Entrypoint": None}}

    def __call__(self, script: str) -> Ran:
        self.log.append(script)
        words = shlex.split(script.split(" >/dev/null")[0])
        verb = words[1]
        if words[1:3] == ["image", "inspect"]:
            return Ran(0, json.dumps([self.image(words[3])]), "")
        if verb == "inspect":
            found = [self.containers[n] for n in words[4:] if n in self.containers]
            return Ran(0 if len(found) == len(words[4:]) else 1, json.dumps(found), "")
        if verb == "stop":
            self.containers[words[-1]]["Running"] = False
        elif verb == "start":
            self.containers[words[-1]]["Running"] = True
        elif verb == "rename":
            document = self.containers.pop(words[2])
            document["Name"] = "/" + words[3]
            self.containers[words[3]] = document
        elif verb == "rm":
            name = next(n for n, d in self.containers.items() if d["Id"] == words[-1])
            del self.containers[name]
        elif verb == "run":
            self.made += 1
            name = words[words.index("--name") + 1]
            labels = dict(w.split("=", 1) for i, w in enumerate(words) if i and words[i - 1] == "--label")
            reference = next(w for w in words if w.startswith(REPO))
            self.containers[name] = {"Id": str(self.made) * 64, "Name": "/" + name, "Running": True,
                                     "Image": image_id(reference.rpartition("@")[2]), "argv": words,
                                     "Config": {"Labels": labels}}
        return Ran(0, "", "")


@pytest.fixture
def nodes() -> dict[str, FakeDocker]:
    fleet = {node: FakeDocker() for node in NODES}
    for docker in fleet.values():
        docker.site_container(NEW)
    return fleet


def restarter(nodes: dict[str, FakeDocker]) -> ContainerRestarter:
    return ContainerRestarter(lambda node, script, _timeout: nodes[node](script))


def test_a_b_a_keeps_the_sites_container_and_removes_only_its_own(nodes: dict[str, FakeDocker]) -> None:
    restart, said = restarter(nodes), list[str]()
    restart.restart(lane(NEW), lane(OLD), said.append)  # B: the previous release's image
    for docker in nodes.values():
        held, ours = docker.containers["dsv41-flash.held-by-sparkbase"], docker.containers["dsv41-flash"]
        assert held["Id"] == "5" * 64 and held["Running"] is False
        assert ours["Image"] == image_id(OLD) and ours["Config"]["Labels"] == {HOLDS_LABEL: "5" * 64}
        argv = ours["argv"]
        assert argv[argv.index("--restart") + 1] == "no" and "-v" in argv and "/opt/nccl:/nccl:ro" in argv
        assert "NCCL_IB_MERGE_NICS=0" in argv and "PATH=/usr/bin" not in argv  # the image's own env left
        assert argv[-3:] == ["python3", "-m", "sglang"]
    assert said == ["stopped dsv41-flash on spark2, spark1",
                    f"started container dsv41-flash from {OLD[:19]} on spark1, spark2"]
    restart.restart(lane(OLD), lane(NEW), said.append)  # A': the site's own again
    for docker in nodes.values():
        assert list(docker.containers) == ["dsv41-flash"]
        site = docker.containers["dsv41-flash"]
        assert site["Id"] == "5" * 64 and site["Running"] is True
        assert [s for s in docker.log if " rm " in s] == [f"docker rm -f {'1' * 64} >/dev/null"]


def test_the_previous_image_is_pulled_before_anything_stops(nodes: dict[str, FakeDocker]) -> None:
    restarter(nodes).restart(lane(NEW), lane(OLD), lambda _line: None)
    log = nodes["spark1"].log
    pulled = next(i for i, s in enumerate(log) if "docker pull" in s)
    stopped = next(i for i, s in enumerate(log) if s.startswith("docker stop"))
    assert pulled < stopped


def test_a_container_it_cannot_run_again_is_refused_before_anything_stops(
        nodes: dict[str, FakeDocker]) -> None:
    nodes["spark2"].site_container(NEW, Privileged=True, PortBindings={"8000/tcp": [{"HostPort": "8000"}]})
    said = (r"^spark2: the site's container has options a comparison cannot give another image: "
            r"HostConfig.PortBindings = .*HostConfig.Privileged = True \(nothing was stopped\)$")
    with pytest.raises(RestartError, match=said):
        restarter(nodes).restart(lane(NEW), lane(OLD), lambda _line: None)
    assert all(d.containers["dsv41-flash"]["Running"] for d in nodes.values())
    assert not [s for d in nodes.values() for s in d.log if not s.startswith("docker inspect")
                and not s.startswith("docker image inspect")]


def test_a_session_cut_short_is_put_back(nodes: dict[str, FakeDocker]) -> None:
    restart = restarter(nodes)
    restart.restart(lane(NEW), lane(OLD), lambda _line: None)
    assert restart.needs_putting_back(lane(NEW)) == NODES
    nodes["spark2"].containers.pop("dsv41-flash")  # cut between the rename and the run
    restart.restart(lane(NEW), lane(NEW), lambda _line: None)
    assert restart.needs_putting_back(lane(NEW)) == []
    assert all(list(d.containers) == ["dsv41-flash"] and d.containers["dsv41-flash"]["Id"] == "5" * 64
               for d in nodes.values())


def test_a_container_under_the_lanes_name_that_is_not_sparkbases_is_never_removed(
        nodes: dict[str, FakeDocker]) -> None:
    restarter(nodes).restart(lane(NEW), lane(OLD), lambda _line: None)
    nodes["spark1"].containers["dsv41-flash"]["Config"]["Labels"] = {}  # somebody else's now
    said = r"spark1: both dsv41-flash and dsv41-flash\.held-by-sparkbase exist and neither is sparkbase's"
    with pytest.raises(RestartError, match=said):
        restarter(nodes).restart(lane(OLD), lane(NEW), lambda _line: None)
    assert not [s for s in nodes["spark1"].log if " rm " in s]


def test_a_node_without_the_sites_container_is_said() -> None:
    fleet = {node: FakeDocker() for node in NODES}
    with pytest.raises(RestartError, match="spark1: no container dsv41-flash of the site's"):
        restarter(fleet).restart(lane(NEW), lane(OLD), lambda _line: None)


def test_the_gate_judges_with_the_lane_stopped_and_can_keep_it_stopped(nodes: dict[str, FakeDocker]) -> None:
    seen: list[bool] = []

    def gate() -> None:
        seen.extend(d.containers["dsv41-flash"]["Running"] for d in nodes.values())
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        restarter(nodes).restart(lane(NEW), lane(NEW), lambda _line: None, gate)
    assert seen == [False, False]
    assert not [s for d in nodes.values() for s in d.log if s.startswith(("docker start", "docker run"))]
