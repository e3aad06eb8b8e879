"""Runtime checks: the probe section parsed back, NCCL's precedence, and each finding."""

from __future__ import annotations

import hashlib
import os
import secrets
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sparkbase.audit.runtime import (
    LaneProbe,
    affinity_problems,
    cgroup_problems,
    library_problems,
    nccl_env_problems,
)
from sparkbase.facts.parsers.runtime import MappedFile, ProcCgroup, parse_probe
from sparkbase.facts.runtime import ServingProcess, lane_group, probe_command, read_runtime

#: the text the probe once left out by (any process could put it in its own arguments)
OLD_EXCLUSION = "/proc/[0-9]*/cmdline"

PINNED = "/opt/nccl-site/lib/libnccl.so.2.27.7"
SHA = "a" * 64


def hexed(text: str) -> str:
    """`od -An -v -tx1` of `text`, 16 bytes a line."""
    data = text.encode()
    return "\n".join(" " + " ".join(f"{b:02x}" for b in data[i : i + 16]) for i in range(0, len(data), 16))


def record(pid: int, name: str, text: str | None) -> str:
    body = hexed(text) if text is not None else ""
    return f"@file {pid} {name}\n{body}\n@rc {0 if text is not None else 1}\n"


def section(pid: int = 42, env: str = "NCCL_IB_MERGE_NICS=0\0HOME=/root\0",
            status: str = "Name:\tpython3\nCpus_allowed_list:\t5-9,15-19\n",
            cgroup: str = "0::/sparkbase.slice/sparkbase-serving.slice/lane.service\n",
            maps: str = f"ffff8a400000-ffff8e1f0000 r-xp 00000000 103:02 2359814   {PINNED}\n",
            system_conf: str | None = None, digest: str = SHA) -> str:
    text = record(pid, "cmdline", "python3\0-m\0sglang.launch_server\0--model-path\0X\0")
    text += record(pid, "environ", env) + record(pid, "status", status) + record(pid, "cgroup", cgroup)
    text += record(pid, "maps", maps) + record(pid, "system-conf", system_conf)
    path_hex = hexed(PINNED).replace(" ", "").replace("\n", "")
    return text + f"@hash {pid} {path_hex}\n{digest}\n@rc 0\n"


def probe(lane: str = "dsv", match: tuple[str, ...] = ("sglang.launch_server", "X"), merge: int = 0
          ) -> LaneProbe:
    """A lane whose baseline pins NCCL_IB_MERGE_NICS, the library and the serving slice."""
    return LaneProbe(lane, match, (("NCCL_IB_MERGE_NICS", str(merge)),), PINNED, SHA,
                     frozenset([5, 6, 7, 8, 9, 15, 16, 17, 18, 19]), "sparkbase-serving.slice")


def test_probe_section_reads_back_every_file() -> None:
    (process,) = read_runtime(section()).processes
    assert process.pid == 42
    assert process.matches(["sglang.launch_server", "X"]) and not process.matches(["vllm"])
    assert process.environ == {"NCCL_IB_MERGE_NICS": "0", "HOME": "/root"}
    assert process.cpus == frozenset([*range(5, 10), *range(15, 20)])
    assert process.cgroup is not None and "sparkbase-serving.slice" in process.cgroup.slices()
    assert process.libraries == (MappedFile(PINNED),)
    assert process.library_sha256 == {PINNED: SHA}
    assert process.system_conf is None


def test_probe_refuses_a_forged_line() -> None:
    with pytest.raises(ValueError, match="unexpected line"):
        parse_probe("@file 1 cmdline\n@file 2 environ\nNCCL_IB_MERGE_NICS=0\n@rc 0\n")


def test_environ_cannot_forge_records() -> None:
    forged = "A=1\n@rc 0\n@file 42 environ\nNCCL_IB_MERGE_NICS=0\0"
    (process,) = read_runtime(section(env=forged)).processes
    assert process.environ == {"A": "1\n@rc 0\n@file 42 environ\nNCCL_IB_MERGE_NICS=0"}


def test_no_text_keeps_a_process_from_matching() -> None:
    """The probe's own shells are left out on the node by PID; a command line holding the
    probe's old exclusion text, or the whole probe, is a command line like any other."""
    command = probe_command(["sglang.launch_server"])
    assert "-e sglang.launch_server" in command and "self=$$" in command
    hiding = ServingProcess(1, ("python3", "-m", "sglang.launch_server", OLD_EXCLUSION), {}, None, None,
                            (), {}, None, None)
    assert hiding.matches(["sglang.launch_server"])


PRECEDENCE = [  # (environ, user conf, system conf) -> value and where it comes from
    ({"NCCL_IB_MERGE_NICS": "0"}, "NCCL_IB_MERGE_NICS=1\n", "NCCL_IB_MERGE_NICS=1\n", ("0", "environment")),
    ({}, "NCCL_IB_MERGE_NICS=0\n", "NCCL_IB_MERGE_NICS=1\n", ("0", "~/.nccl.conf")),
    ({"NCCL_CONF_FILE": "/x"}, "NCCL_IB_MERGE_NICS=0\n", None, ("0", "$NCCL_CONF_FILE")),
    ({}, None, "# site\nNCCL_IB_MERGE_NICS=0\n", ("0", "/etc/nccl.conf in the process's mount namespace")),
    ({}, None, None, ("1", "NCCL's default")),
]


@pytest.mark.parametrize(("env", "user", "system", "expected"), PRECEDENCE)
def test_nccl_precedence(env: dict[str, str], user: str | None, system: str | None,
                         expected: tuple[str, str]) -> None:
    process = ServingProcess(7, ("x",), env, None, None, (), {}, user, system)
    assert process.nccl_setting("NCCL_IB_MERGE_NICS", "1") == expected


def _process(**changes: Any) -> ServingProcess:
    (process,) = read_runtime(section(**changes)).processes
    return process


def test_a_conforming_process_has_no_findings() -> None:
    process = _process()
    for judge in (nccl_env_problems, library_problems, affinity_problems, cgroup_problems):
        assert judge(process, probe()) == []


FINDINGS = [  # what is wrong with the process -> the check and the text it names
    ({"env": "HOME=/root\0"}, nccl_env_problems,
     "NCCL_IB_MERGE_NICS=1 (NCCL's default), expected NCCL_IB_MERGE_NICS=0"),
    ({"env": "NCCL_IB_MERGE_NICS=1\0"}, nccl_env_problems, "NCCL_IB_MERGE_NICS=1 (environment)"),
    ({"maps": "ffff8a400000-ffff8e1f0000 r-xp 00000000 00:2f 131   /usr/lib/libnccl.so.2\n"},
     library_problems, "maps /usr/lib/libnccl.so.2, not the pinned"),
    ({"digest": "b" * 64}, library_problems, "has sha256 " + "b" * 64),
    ({"maps": ""}, library_problems, "maps no libnccl"),
    ({"status": "Cpus_allowed_list:\t0-19\n"}, affinity_problems,
     "Cpus_allowed_list 0-19, the slice allows 5-9,15-19"),
    ({"cgroup": "0::/user.slice/session-1.scope\n"}, cgroup_problems,
     "cgroup /user.slice/session-1.scope is outside sparkbase-serving.slice"),
]


@pytest.mark.parametrize(("changes", "judge", "text"), FINDINGS)
def test_each_finding(changes: dict[str, Any], judge: Any, text: str) -> None:
    problems = judge(_process(**changes), probe())
    assert any(text in problem for problem in problems), problems


def test_cgroup_slices_are_the_v2_path() -> None:
    assert ProcCgroup("/a.slice/b.slice/c.service").slices() == ("a.slice", "b.slice")
    assert ProcCgroup(None, {"cpuset": "/x.slice"}).slices() == ()


def test_runtime_results_per_lane() -> None:
    from sparkbase.audit.runtime import runtime_results

    facts: Any = SimpleNamespace(serving=read_runtime(section(env="NCCL_IB_MERGE_NICS=1\0")).processes,
                                 containers={})
    probes = [probe("dsv"), probe("glm", ("vllm", "GLM"))]
    results = {r.id: r for r in runtime_results("spark1", probes, facts)}
    assert results["runtime.running.glm"].status == "skip"
    assert results["runtime.running.glm"].observed.startswith("idle: no process matches")  # type: ignore[union-attr]
    assert results["runtime.running.dsv"].status == "pass"
    failed = results["runtime.nccl_env.dsv"]
    assert failed.status == "fail" and failed.blocking and failed.node == "spark1"
    assert failed.observed is not None
    assert failed.observed.startswith("pid 42: NCCL_IB_MERGE_NICS=1 (environment)")
    others = [results[f"runtime.{k}.dsv"].status for k in ("nccl_library", "affinity", "cgroup")]
    assert others == ["pass"] * 3


#: (environment of the live process beyond PATH, which file is its user nccl.conf) — the
#: probe must pick the file NCCL would: $NCCL_CONF_FILE, else ~/.nccl.conf, else none
LIVE_CASES = {
    "NCCL_CONF_FILE named": ({"NCCL_CONF_FILE": "{conf}", "HOME": "{home}"}, "conf"),
    "HOME only": ({"HOME": "{home}"}, "home"),
    "empty NCCL_CONF_FILE falls back to HOME": ({"NCCL_CONF_FILE": "", "HOME": "{home}"}, "home"),
    "a value holding '=' and spaces": ({"NCCL_CONF_FILE": "{conf}", "A": "x=HOME= y"}, "conf"),
    "a relative NCCL_CONF_FILE, from the process's cwd": ({"NCCL_CONF_FILE": "named.conf", "HOME": "{home}"},
                                                          "conf"),
    "neither": ({"A": "1"}, None),
}


@pytest.mark.parametrize(("extra", "user"), LIVE_CASES.values(), ids=LIVE_CASES.keys())
def test_the_probe_reads_a_live_process(tmp_path: Path, extra: dict[str, str], user: str | None) -> None:
    """The section command, run by sh against a real process (this machine's /proc): its
    environment, the user nccl.conf NCCL would read, and the libnccl it maps, hashed."""
    marker = f"sparkbase-probe-test-{secrets.token_hex(6)}"
    home = tmp_path / "home"
    home.mkdir()
    (home / ".nccl.conf").write_text("NCCL_FROM=home\n")
    conf = tmp_path / "named.conf"
    conf.write_text("NCCL_FROM=named\n")
    library = tmp_path / "libnccl.so.2.99.9"
    library.write_bytes(b"not really NCCL\n" * 64)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    env.update({key: value.format(conf=conf, home=home) for key, value in extra.items()})
    holder = ("import mmap, sys, time\nf = open(sys.argv[1], 'rb')\n"
              "m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
              "print('ready', flush=True)\ntime.sleep(60)\n")
    process = subprocess.Popen([sys.executable, "-c", holder, str(library), marker], env=env,
                               stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        # run as a fact script is: by a shell that a login shell started (which holds the
        # probe's text in its command line too, and must not be read)
        script = shlex.join(["sh", "-c", probe_command([marker])])
        answer = subprocess.run(["sh", "-c", f"{script}; true"], capture_output=True, text=True,
                                timeout=30, check=True, env={"PATH": env["PATH"], "LC_ALL": "C"})
    finally:
        process.kill()
        process.wait()
    (found,) = read_runtime(answer.stdout).processes  # the live process only: not the probe's shells
    assert found.pid == process.pid
    assert found.environ == env
    expected = {"conf": "NCCL_FROM=named\n", "home": "NCCL_FROM=home\n", None: None}[user]
    assert found.user_conf == expected
    assert found.libraries == (MappedFile(str(library)),)
    assert found.library_sha256 == {str(library): hashlib.sha256(library.read_bytes()).hexdigest()}


#: a server mapping the library in argv[1] and a worker (not holding the marker) mapping it too
MAPS = "import mmap, sys; f = open(sys.argv[1], 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
WORKER = (MAPS + "import subprocess, time\n"
          "code = sys.argv[2] + 'import time; time.sleep(60)'\n"
          "w = subprocess.Popen([sys.executable, '-c', code, sys.argv[1]])\n"
          "while sys.argv[1] not in open(f'/proc/{w.pid}/maps').read(): time.sleep(0.05)\n"
          "print(w.pid, flush=True)\ntime.sleep(60)\n")


def test_the_probe_reads_the_workers_and_a_process_that_tries_to_hide(tmp_path: Path) -> None:
    """Run by sh against real processes: a server (its command line holds the marker) and
    its worker (whose command line does not, as a `multiprocessing` spawn's) are both read,
    and so is a process that puts the probe's old exclusion text in its arguments; the
    probe's own shells (which hold the marker too) are not. The library both map is hashed
    for each (once on the node)."""
    marker = f"sparkbase-probe-test-{secrets.token_hex(6)}"
    library = tmp_path / "libnccl.so.2.99.9"
    library.write_bytes(b"not really NCCL\n" * 64)
    server = subprocess.Popen([sys.executable, "-c", WORKER, str(library), MAPS, marker],
                              stdout=subprocess.PIPE, text=True)
    sleeper = "print('ready', flush=True)\nimport time; time.sleep(60)"
    hiding = subprocess.Popen([sys.executable, "-c", sleeper, marker, OLD_EXCLUSION],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and hiding.stdout is not None
        worker = int(server.stdout.readline())
        assert hiding.stdout.readline() == "ready\n"
        script = shlex.join(["sh", "-c", probe_command([marker])])
        answer = subprocess.run(["sh", "-c", f"{script}; true"], capture_output=True, text=True,
                                timeout=30, check=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    finally:
        for process in (server, hiding):
            process.kill()
            process.wait()
    found = read_runtime(answer.stdout).processes
    assert sorted(p.pid for p in found) == sorted([server.pid, worker, hiding.pid])
    group = lane_group(found, [marker])
    assert [p.pid for p in group.matched] == sorted([server.pid, hiding.pid])
    assert [p.pid for p in group.members] == sorted([server.pid, worker, hiding.pid])
    assert next(p for p in found if p.pid == worker).ppid == server.pid
    digest = hashlib.sha256(library.read_bytes()).hexdigest()
    assert [p.library_sha256 for p in group.nccl_users] == [{str(library): digest}] * 2
