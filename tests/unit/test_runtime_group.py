"""Which processes are a lane's on a node: the matched ones, their cgroup (the unit's or
container's, real cgroup forms from tests/fixtures/real/), their descendants; the probe's
own shells left out by PID, never by text. `lane_group` (Python) and the node's selector
(`SELECT_AWK`, run here by the machine's awk) must agree on every case."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sparkbase.audit.runtime import runtime_results
from sparkbase.facts.parsers.runtime import MappedFile, ProcCgroup, parse_cgroup
from sparkbase.facts.runtime import MAX_DEPTH, SELECT_AWK, ServingProcess, lane_group

REAL = Path(__file__).parents[1] / "fixtures" / "real"
MATCH = ("sglang.launch_server", "DeepSeek")
SERVER = ("python3", "-m", "sglang.launch_server", "--model-path", "DeepSeek")
SPAWN = ("python3", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)",
         "--multiprocessing-fork")
UNIT = "0::/sparkbase.slice/sparkbase-serving.slice/lane-dsv41-flash.service\n"
ROOT = "0::/\n"
SESSION = "0::/user.slice/user-0.slice/session-4.scope\n"


def real(name: str) -> str:
    return (REAL / name).read_text()


DOCKER = real("proc_PID_cgroup__docker_cgroupv2_systemd_driver_host_view__procs-236.txt")
PODMAN = real("proc_PID_cgroup__podman_rootful_cgroupv2_user0_service_container_subcgroup__podman-20423.txt")
HYBRID = real("proc_1_cgroup__inside_docker_hybrid_v1_plus_unified_containerd_service__ctrsploit-280.txt")


def proc(pid: int, ppid: int, args: tuple[str, ...], cgroup: str) -> tuple[int, int, tuple[str, ...], str]:
    return (pid, ppid, args, cgroup)


def processes(table: list[tuple[int, int, tuple[str, ...], str]]) -> list[ServingProcess]:
    return [ServingProcess(pid, args, {}, None, parse_cgroup(cgroup), (), {}, None, None, ppid=ppid)
            for pid, ppid, args, cgroup in table]


def awk_selects(table: list[tuple[int, int, tuple[str, ...], str]], self_pid: int = 1) -> list[int]:
    """What the node's selector prints for this /proc (matches: the first match string)."""
    lines = [f"M /proc/{pid}/cmdline" for pid, _, args, _ in table if MATCH[0] in " ".join(args)]
    for pid, ppid, _, cgroup in table:
        lines.append(f"/proc/{pid}/status:PPid:\t{ppid}")
        lines += [f"/proc/{pid}/cgroup:{line}" for line in cgroup.splitlines() if line]
    done = subprocess.run(["awk", "-v", f"self={self_pid}", "-v", f"MAXD={MAX_DEPTH}", SELECT_AWK],
                          input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
    return sorted(int(line) for line in done.stdout.split())


#: name -> (every process of the node, the members expected; the probe's shell is PID 1's child 2)
CASES: dict[str, tuple[list[Any], list[int]]] = {
    "a systemd unit: the server and its spawned workers": (
        [proc(10, 1, SERVER, UNIT), proc(11, 10, SPAWN, UNIT), proc(12, 10, SPAWN, UNIT),
         proc(20, 1, ("sshd",), "0::/system.slice/ssh.service\n")],
        [10, 11, 12]),
    "the unit's other processes (not descendants) are the lane's too": (
        [proc(10, 1, SERVER, UNIT), proc(30, 1, ("python3", "helper.py"), UNIT)],
        [10, 30]),
    "a worker moved to another cgroup is still the server's child": (
        [proc(10, 1, SERVER, UNIT), proc(11, 10, SPAWN, "0::/elsewhere.slice/x.scope\n"),
         proc(12, 11, ("nccl-helper",), "0::/elsewhere.slice/x.scope\n")],
        [10, 11, 12]),
    "a docker container (cgroup v2, its scope)": (
        [proc(40, 39, SERVER, DOCKER), proc(41, 40, SPAWN, DOCKER), proc(39, 1, ("containerd-shim",),
                                                                         "0::/system.slice/containerd.service\n")],
        [40, 41]),
    "podman: the container's leaf and below it": (
        [proc(50, 1, SERVER, PODMAN), proc(51, 1, SPAWN, PODMAN.rstrip("\n") + "/worker\n"),
         proc(52, 1, ("conmon",), PODMAN.replace("/container", ""))],
        [50, 51]),
    "hybrid: containerd.service on v2 is not the container (the v1 paths are)": (
        [proc(60, 1, SERVER, HYBRID), proc(61, 1, SPAWN, HYBRID),
         proc(62, 1, ("other-container",), HYBRID.replace("2403ccfe", "99999999"))],
        [60, 61]),
    "the root cgroup is nobody's unit: only the server and its children": (
        [proc(70, 1, SERVER, ROOT), proc(71, 70, SPAWN, ROOT), proc(72, 1, ("cron",), ROOT)],
        [70, 71]),
    "a process holding the probe's old exclusion text is judged": (
        [proc(80, 1, (*SERVER, "/proc/[0-9]*/cmdline"), UNIT), proc(81, 80, SPAWN, UNIT)],
        [80, 81]),
    "no process holds the match: nothing": (
        [proc(90, 1, ("python3", "other.py"), UNIT)],
        []),
}


@pytest.mark.parametrize(("table", "members"), CASES.values(), ids=CASES.keys())
def test_lane_members(table: list[Any], members: list[int]) -> None:
    group = lane_group(processes(table), MATCH)
    assert [p.pid for p in group.members] == members
    assert awk_selects(table) == members


def test_the_probe_leaves_out_its_own_shells_by_pid() -> None:
    """sshd (1) -> login shell (2) -> sudo (3) -> sh (4, `$$`) -> grep (5): all hold the
    match string (the probe's text is on their command lines) and share the session's
    cgroup with a lane started by hand there (6); the lane is read, the probe is not."""
    probe_text = ("sh", "-c", "grep -lsF -e sglang.launch_server /proc/[0-9]*/cmdline DeepSeek")
    table = [proc(1, 0, ("sshd",), SESSION), proc(2, 1, ("bash", "-c", *probe_text), SESSION),
             proc(3, 2, ("sudo", *probe_text), SESSION), proc(4, 3, probe_text, SESSION),
             proc(5, 4, ("grep", "-lsF", "-e", "sglang.launch_server"), SESSION),
             proc(6, 1, SERVER, SESSION), proc(7, 6, SPAWN, SESSION)]
    assert awk_selects(table, self_pid=4) == [6, 7]


def test_a_forged_cgroup_line_only_moves_its_own_process() -> None:
    """A cgroup path holding a newline prints a second line under the same file; it cannot
    put the line under another PID, and the descendant rule still catches the process."""
    forged = UNIT.rstrip("\n") + "/x\n0::/system.slice/ssh.service\n"
    table = [proc(10, 1, SERVER, UNIT), proc(11, 10, SPAWN, forged)]
    assert awk_selects(table) == [10, 11]


def test_unit_path_and_holds_on_real_forms() -> None:
    docker, podman, hybrid = parse_cgroup(DOCKER), parse_cgroup(PODMAN), parse_cgroup(HYBRID)
    assert docker.unit_path is not None and docker.unit_path.endswith(".scope")
    assert podman.unit_path is not None and podman.unit_path.endswith("/container")
    assert hybrid.unit_path == "/system.slice/containerd.service"
    assert parse_cgroup(ROOT).unit_path is None
    assert not docker.holds(parse_cgroup("0::/system.slice/ssh.service\n"))
    assert podman.holds(parse_cgroup(PODMAN.rstrip("\n") + "/sub\n"))
    assert not hybrid.holds(parse_cgroup(HYBRID.replace("2403ccfe", "99999999")))
    assert not parse_cgroup(ROOT).holds(parse_cgroup(ROOT))
    assert not ProcCgroup("/a.service").holds(ProcCgroup("/a.service2"))


def _facts(table: list[Any], env: dict[int, dict[str, str]], nccl: set[int]) -> Any:
    from test_runtime import PINNED, SHA


    serving = [ServingProcess(pid, args, env.get(pid, {}), frozenset([5, 6, 7, 8, 9, 15, 16, 17, 18, 19]),
                              parse_cgroup(cgroup), (MappedFile(PINNED),) if pid in nccl else (),
                              {PINNED: SHA} if pid in nccl else {}, None, None, ppid=ppid)
               for pid, ppid, args, cgroup in table]
    return SimpleNamespace(serving=tuple(serving), containers={})


def test_a_wrong_setting_only_in_a_worker_fails_naming_the_worker() -> None:
    from test_runtime import probe

    table = [proc(10, 1, SERVER, UNIT), proc(11, 10, SPAWN, UNIT), proc(12, 10, SPAWN, UNIT)]
    facts = _facts(table, {10: {"NCCL_IB_MERGE_NICS": "0"}, 11: {"NCCL_IB_MERGE_NICS": "0"},
                           12: {"NCCL_IB_MERGE_NICS": "1"}}, nccl={11, 12})
    results = {r.id: r for r in runtime_results("spark1", [probe("dsv", MATCH)], facts)}
    env = results["runtime.nccl_env.dsv"]
    assert env.status == "fail"
    assert env.observed == "pid 12: NCCL_IB_MERGE_NICS=1 (environment), expected NCCL_IB_MERGE_NICS=0"
    assert env.expected is not None and "/proc/PID/environ at start" in env.expected
    assert results["runtime.nccl_library.dsv"].observed == "pid 11, pid 12"  # the ones that map it
    assert results["runtime.running.dsv"].status == "pass"
    running = results["runtime.running.dsv"].observed or ""
    assert "2 more in its cgroup or below it (pid 11, pid 12)" in running


def test_not_serving_fails_where_the_lane_must_serve_and_is_idle_elsewhere() -> None:
    from dataclasses import replace

    from test_runtime import probe

    facts = _facts([proc(90, 1, ("python3", "other.py"), UNIT)], {}, set())
    idle, = runtime_results("spark1", [probe("dsv", MATCH)], facts)
    assert (idle.id, idle.status) == ("runtime.running.dsv", "skip")
    required, = runtime_results("spark1", [replace(probe("dsv", MATCH), required=True)], facts)
    assert (required.status, required.blocking) == ("fail", True)
    assert required.observed == "not serving: no process matches sglang.launch_server DeepSeek"
