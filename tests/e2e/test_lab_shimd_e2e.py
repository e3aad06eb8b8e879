"""Node commands through the node's command server (shims/shimd.py) answer exactly as the
python wrappers do, for root and for a sudo user; without the server the C client falls
back to python; a reboot brings the server back.

One factory-fresh single-node lab for the module (port base 3021)."""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator

import pytest
from fleets import one_node_lab
from ports import port_base

from sparkbase_lab.fleet import Lab

pytestmark = pytest.mark.end_to_end

NODE = "spark1"
PORT_BASE = port_base("SPARKBASE_TEST_SHIMD_PORT_BASE", 3021)
SOCKET = "/run/sparkbase-lab/shimd.sock"
SHIM = "/usr/local/lib/sparkbase-lab/shim.py"
PYTHON_SHIM = f"python3 -IS {SHIM}"
#: prints the PID of the node's command server (found by its command line)
SERVER_PID = ("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null "
              "| grep -q '^[^ ]*python3 -IS [^ ]*shim[.]py __shimd__ $' && echo ${p#/proc/}; done; true")

#: command lines whose stdout, stderr and status must not depend on the way they run
SAME_ANSWER = (
    "uname -r", "uname -a", "getconf PAGESIZE", "nproc", "systemctl get-default",
    "systemctl is-active nv-cpu-governor", "systemctl is-enabled gdm3", "systemctl no-such-verb",
    "nvidia-smi --query-gpu=name,driver_version --format=csv,noheader", "mokutil --sb-state",
    "mokutil --help", "swapon --show --bytes", "ip -j addr", "dkms status", "modinfo -F version nvidia",
    "lsmod", "nvme list", "no-such-arguments-for-modprobe --x",
)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One factory-fresh node for this module, with the sudo user `ops`."""
    for fleet in one_node_lab(tmp_path_factory, "lab-shimd", PORT_BASE):
        fleet.add_sudo_user("ops")
        wait_for_server(fleet)
        yield fleet


def ok(lab: Lab, command: str) -> str:
    rc, out, err = lab.run(NODE, command)
    assert rc == 0, f"{command!r} -> {rc}\n{out}\n{err}"
    return out


def wait_for_server(lab: Lab, timeout: float = 20.0) -> int:
    """The PID of the node's command server once its socket is there."""
    deadline = time.monotonic() + timeout
    while True:
        pids = ok(lab, f"test -S {SOCKET} && {{ {SERVER_PID}; }} || true").split()
        if len(pids) == 1:
            return int(pids[0])
        assert time.monotonic() < deadline, f"no command server: {pids}"
        time.sleep(0.1)


def both_ways(lab: Lab, command: str, prefix: str = "") -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """(status, stdout, stderr) of `command` through /usr/local/bin (the C client), then
    through the python entry the wrappers run."""
    argv = shlex.split(command)
    if argv[0].startswith("no-such-arguments-for-"):
        argv[0] = argv[0].removeprefix("no-such-arguments-for-")
    line = shlex.join(argv)
    return lab.run(NODE, f"{prefix}{line}"), lab.run(NODE, f"{prefix}{PYTHON_SHIM} {line}")


PROBE = "#!/bin/sh\ntr '\\0' ' ' < /proc/$PPID/cmdline > /tmp/shimd-probe\n"
PROBE_UNIT = "[Service]\nType=oneshot\nExecStart=/usr/local/sbin/shimd-probe\n"


def who_ran_systemctl(lab: Lab) -> str:
    """The command line of the process that ran `systemctl start` (a oneshot unit's
    ExecStart is its child and records its parent's /proc/PID/cmdline)."""
    lab.run(NODE, "cat > /usr/local/sbin/shimd-probe && chmod 755 /usr/local/sbin/shimd-probe", input=PROBE)
    lab.run(NODE, "cat > /etc/systemd/system/shimd-probe.service", input=PROBE_UNIT)
    return ok(lab, "rm -f /tmp/shimd-probe; systemctl start shimd-probe && cat /tmp/shimd-probe")


def test_the_commands_are_the_client_and_the_server_runs_them(lab: Lab) -> None:
    assert ok(lab, "head -c 4 /usr/local/bin/uname | od -An -c").split() == ["177", "E", "L", "F"]
    assert ok(lab, "head -c 2 /usr/local/bin/reboot") == "#!"  # ends the node: never the server's
    assert ok(lab, f"stat -c '%a %U' {SOCKET}") == "666 root\n"
    wait_for_server(lab)
    assert who_ran_systemctl(lab) == f"/usr/bin/python3 -IS {SHIM} __shimd__ "


@pytest.mark.parametrize("command", SAME_ANSWER)
def test_server_and_python_answer_alike(lab: Lab, command: str) -> None:
    served, python = both_ways(lab, command)
    assert served == python


@pytest.mark.parametrize("command", ["uname -r", "systemctl get-default", "swapon --show",
                                     "mokutil --sb-state", "lsmod", "dkms status"])
def test_a_sudo_user_gets_the_same_answers(lab: Lab, command: str) -> None:
    served, python = both_ways(lab, command, prefix="sudo -u ops ")
    assert served == python


def test_a_worker_runs_as_the_caller_in_its_directory_with_its_umask(lab: Lab) -> None:
    out = ok(lab, "rm -rf /tmp/shimd-ops && install -d -o ops -m 755 /tmp/shimd-ops && "
                  "sudo -u ops sh -c 'cd /tmp/shimd-ops && umask 027 && fallocate -l 4096 made' && "
                  "stat -c '%U %G %a %s' /tmp/shimd-ops/made")
    assert out == "ops ops 640 4096\n"
    rc, _out, err = lab.run(NODE, "sudo -u ops fallocate -l 4096 /root/not-for-ops")
    assert rc == 1 and "Permission denied" in err


def test_without_the_server_the_client_falls_back_to_python(lab: Lab) -> None:
    before = [both_ways(lab, command) for command in ("uname -r", "systemctl is-active nv-cpu-governor")]
    pid = wait_for_server(lab)
    ok(lab, f"kill {pid}; while kill -0 {pid} 2>/dev/null; do sleep 0.05; done")
    assert ok(lab, f"test -S {SOCKET} && echo stale") == "stale\n"  # the socket refuses
    refused = [both_ways(lab, command) for command in ("uname -r", "systemctl is-active nv-cpu-governor")]
    ok(lab, f"rm {SOCKET}")  # the socket is missing
    missing = [both_ways(lab, command) for command in ("uname -r", "systemctl is-active nv-cpu-governor")]
    assert before == refused == missing
    assert who_ran_systemctl(lab) == f"/usr/bin/python3 -IS {SHIM} systemctl start shimd-probe "
    assert before[0][0] == (0, ok(lab, f"{PYTHON_SHIM} uname -r"), "")
    assert ok(lab, SERVER_PID) == ""


def test_after_a_reboot_the_server_is_back(lab: Lab) -> None:
    before = wait_for_server(lab) if ok(lab, SERVER_PID) else 0
    lab.reboot(NODE)
    after = wait_for_server(lab)
    assert after != before
    served, python = both_ways(lab, "systemctl get-default")
    assert served == python == (0, "graphical.target\n", "")
