"""Values as the site's fleet has them: a libnccl bind-mounted into a container is the host
file it mounts, lanes pinned by their containers' own CPU lists, and the command line of a
kernel sparkbase does not manage."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from test_audit_support import converged
from test_containers import _container

from sparkbase.audit.expected import expected_for
from sparkbase.audit.run import judge_node
from sparkbase.audit.runtime import LaneProbe, library_problems
from sparkbase.deploy.steps import build_steps
from sparkbase.facts.parsers.docker import ContainerMount
from sparkbase.facts.parsers.runtime import MappedFile
from sparkbase.facts.runtime import ServingProcess
from sparkbase.model.site import Site, load_site
from sparkbase.render import node_files

REPO = Path(__file__).resolve().parents[2]
SITE_LIB = "/opt/nccl-site/lib/libnccl.so.2.27.7"
IMAGE_LIB = "/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2"
SHA = "5" * 64


def bind(source: str, destination: str) -> ContainerMount:
    return ContainerMount("bind", source, destination, True)


MOUNT_CASES = {  # mounts, path in the container -> host path
    "the file itself": ([bind(SITE_LIB, IMAGE_LIB)], IMAGE_LIB, SITE_LIB),
    "a directory holding it": ([bind("/opt/nccl-site/lib", "/usr/lib/nccl")],
                               "/usr/lib/nccl/libnccl.so.2", "/opt/nccl-site/lib/libnccl.so.2"),
    "the deepest mount wins": ([bind("/a", "/usr"), bind("/b/lib", "/usr/lib")],
                               "/usr/lib/x.so", "/b/lib/x.so"),
    "a name that only starts alike": ([bind("/a", "/usr/lib")], "/usr/lib64/x.so", None),
    "a volume is not a host path": ([ContainerMount("volume", "/var/lib/docker/volumes/v/_data", "/usr/lib",
                                                    False)], "/usr/lib/x.so", None),
    "no mount at all": ([], IMAGE_LIB, None),
}


@pytest.mark.parametrize(("mounts", "path", "host"), MOUNT_CASES.values(), ids=MOUNT_CASES.keys())
def test_the_host_file_behind_a_container_path(mounts: list[ContainerMount], path: str,
                                               host: str | None) -> None:
    assert _container(mounts=tuple(mounts)).host_path(path) == host


def _probe() -> LaneProbe:
    return LaneProbe(lane="dsv41-flash", match=("sglang.launch_server",), nccl_env=(), library_path=SITE_LIB,
                     library_sha256=SHA, slice_cpus=frozenset({5}), slice_name=None,
                     container="dsv41-flash", image=None)


def _process(path: str, sha: str = SHA) -> ServingProcess:
    return ServingProcess(pid=150, ppid=1, args=("python3", "-m", "sglang.launch_server"), environ={},
                          cpus=frozenset({5}), cgroup=None, libraries=(MappedFile(path, False),),
                          library_sha256={path: sha}, user_conf=None, system_conf=None)


def test_a_bind_mounted_site_library_is_the_pinned_one() -> None:
    mounted = _container(mounts=(bind(SITE_LIB, IMAGE_LIB),))
    assert library_problems(_process(IMAGE_LIB), _probe(), mounted) == []
    # the image's own libnccl at that path (no bind mount) is not
    assert library_problems(_process(IMAGE_LIB), _probe(), _container(mounts=())) == [
        f"maps {IMAGE_LIB}, not the pinned {SITE_LIB}"]
    # the mount is right but the file behind it is not the pinned one
    assert "has sha256" in library_problems(_process(IMAGE_LIB, "6" * 64), _probe(), mounted)[0]


def _site(tmp_path: Path, edit: str) -> Site:
    for part in ("baselines", "inventory", "lanes"):
        shutil.copytree(REPO / part, tmp_path / part)
    file = tmp_path / "baselines" / "site-stock-6.17-4k.yaml"
    file.write_text(re.sub(r"^(version: .*\n)", rf"\1{edit}", file.read_text(), count=1, flags=re.M))
    return load_site(tmp_path)


def test_lanes_pinned_by_their_containers_need_no_slice(tmp_path: Path) -> None:
    site = _site(tmp_path, 'cpuset: {pinned_by: container, cpus: "5-9,15-19"}\n')
    shipped = load_site(REPO)
    slice_file = "/etc/systemd/system/sparkbase-serving.slice"
    assert slice_file in [f.path for f in node_files(shipped, "spark1")]
    assert slice_file not in [f.path for f in node_files(site, "spark1")]
    assert "daemon-reload" in [s.kind for s in build_steps(shipped, "spark1")]
    assert "daemon-reload" not in [s.kind for s in build_steps(site, "spark1")]
    facts = replace(converged(expected_for(shipped, "spark1")), slice_allowed_cpus=None)
    results = {r.id: r for r in judge_node(expected_for(site, "spark1"), facts)}
    assert results["cpuset.slice"].status == "skip"
    assert "--cpuset-cpus" in (results["cpuset.slice"].observed or "")
    shipped_results = {r.id: r for r in judge_node(expected_for(shipped, "spark1"), facts)}
    assert shipped_results["cpuset.slice"].status == "fail"


def test_an_unmanaged_kernel_requires_only_the_arguments_the_baseline_names(tmp_path: Path) -> None:
    shipped = load_site(REPO)
    facts = replace(converged(expected_for(shipped, "spark1")), cmdline=("ro", "quiet"))
    managed = {r.id: r for r in judge_node(expected_for(shipped, "spark1"), facts)}
    assert managed["kernel.cmdline"].status == "fail"  # transparent_hugepage=madvise is sparkbase's
    as_found = _site(tmp_path, "managed: [memory]\n")
    results = {r.id: r for r in judge_node(expected_for(as_found, "spark1"), facts)}
    assert results["kernel.cmdline"].status == "pass"
    _site(tmp_path / "apst", "managed: [memory]\n")
    file = tmp_path / "apst" / "baselines" / "site-stock-6.17-4k.yaml"
    file.write_text(file.read_text().replace("\nhost:\n", "\nhost:\n  nvme: {apst: disabled}\n", 1))
    apst = load_site(tmp_path / "apst")  # APST is judged only on the command line: still required
    apst_results = {r.id: r for r in judge_node(expected_for(apst, "spark1"), facts)}
    assert apst_results["kernel.cmdline"].status == "fail"
    forbidden = replace(facts, cmdline=("ro", "quiet", "splash"))
    assert {r.id: r for r in judge_node(expected_for(as_found, "spark1"), forbidden)}[
        "kernel.cmdline"].status == "fail"
