"""The node command server's protocol (shims/shimd.py) and its C client (shims/client.c),
without a lab: requests encoded and decoded, and a real client talking to a real server on
a socket of the test's own, running stand-in commands."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbase_lab import image, shimd_client
from sparkbase_lab.shims import registry, shimd
from sparkbase_lab.shims.shimd import ProtocolError, Request, decode_request, encode_request

ROUND_TRIPS = {
    "plain": Request("uname", ["-r"], "/root", 0o022, {"PATH": "/usr/bin", "LANG": "C.UTF-8"}),
    "no arguments, no environment": Request("lsmod", [], "/", 0o077, {}),
    "empty and spaced arguments": Request("systemctl", ["", "is-active", "a b", "--x=y"], "/tmp", 0, {}),
    "= in a value": Request("ip", ["-j", "addr"], "/", 0o002, {"A": "b=c=d", "EMPTY": ""}),
    "non-UTF-8 bytes": Request("modinfo", [os.fsdecode(b"\xff\xfe")], os.fsdecode(b"/tmp/\xe9"), 0o022,
                               {"X": os.fsdecode(b"\x80")}),
}


@pytest.mark.parametrize("request_", ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
def test_a_request_survives_encoding(request_: Request) -> None:
    assert decode_request(encode_request(request_)) == request_


def test_the_payload_is_nul_terminated_fields_in_order() -> None:
    payload = encode_request(Request("uname", ["-r", "x"], "/root", 0o022, {"K": "v"}))
    assert payload == b"sparkbase-shimd-1\0uname\0/root\x0022\x002\0-r\0x\0K=v\0"


BAD_PAYLOADS = {
    "no trailing NUL": b"sparkbase-shimd-1\0uname\0/\x0022\x000",
    "other version": b"sparkbase-shimd-2\0uname\0/\x0022\x000\0",
    "too few fields": b"sparkbase-shimd-1\0uname\0/\0",
    "umask not octal": b"sparkbase-shimd-1\0uname\0/\x0099\x000\0",
    "umask too large": b"sparkbase-shimd-1\0uname\0/\x001777\x000\0",
    "argc beyond the fields": b"sparkbase-shimd-1\0uname\0/\x0022\x003\0-r\0",
    "negative argc": b"sparkbase-shimd-1\0uname\0/\x0022\0-1\0",
    "empty": b"",
}


@pytest.mark.parametrize("payload", BAD_PAYLOADS.values(), ids=BAD_PAYLOADS.keys())
def test_a_malformed_request_is_refused(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_request(payload)


def test_environment_entries_without_a_name_are_dropped() -> None:
    payload = b"sparkbase-shimd-1\0uname\0/\x0022\x000\0NOEQUALS\0=x\0A=1\0A=2\0"
    assert decode_request(payload).env == {"A": "1"}


def test_a_nul_in_a_field_cannot_be_encoded() -> None:
    with pytest.raises(ProtocolError):
        encode_request(Request("uname", ["a\0b"], "/", 0o022, {}))


@pytest.mark.parametrize(("wait_status", "expected"), [(0, 0), (3 << 8, 3), (signal.SIGKILL, 137),
                                                       (signal.SIGSEGV, 139)])
def test_exit_status_is_what_a_shell_reports(wait_status: int, expected: int) -> None:
    assert shimd.exit_status(wait_status) == expected


def test_the_server_never_runs_the_power_commands_or_internal_entries() -> None:
    assert {"reboot", "shutdown", "poweroff", "halt", "__serve__", "__boot__"} <= set(registry.NOT_SERVED)
    assert registry.MODULES["__shimd__"] == "shimd" and "__shimd__" in registry.INTERNAL
    assert "__shimd__" not in registry.commands()


def test_install_shims_copies_the_client_except_where_python_must_run(tmp_path: Path) -> None:
    client = tmp_path / "client"
    client.write_bytes(b"\x7fELF stand-in")
    upper = tmp_path / "upper"
    image.install_shims(upper, client)
    bin_dir = upper / "usr/local/bin"
    assert (bin_dir / "uname").read_bytes() == client.read_bytes()
    assert (bin_dir / "systemctl").stat().st_mode & 0o777 == 0o755
    for command in ("reboot", "shutdown", "poweroff", "halt"):
        assert (bin_dir / command).read_text().startswith("#!/usr/bin/python3 -IS\n"), command
    assert os.readlink(upper / "usr/sbin/ip") == "/usr/local/bin/ip"
    image.install_shims(upper, None)  # no compiler: every command is a python wrapper again
    assert (bin_dir / "uname").read_text().startswith("#!/usr/bin/python3 -IS\n")


# --- a real client and server -------------------------------------------------------------

#: stand-in commands the test server runs (registry.resolve is replaced in its process)
SERVER = """
import os, sys
from sparkbase_lab.shims import registry, shimd

def cat(argv):
    data = sys.stdin.read()
    sys.stdout.write(data.upper())
    return 0

def who(argv):
    print(os.getuid(), os.getgid(), os.getcwd(), oct(os.umask(0)), os.environ.get("SHIMD_TEST"), *sys.argv)
    return 0

def fail(argv):
    print("to stdout")
    print("to stderr", file=sys.stderr)
    return int(argv[0])

def boom(argv):
    raise RuntimeError("worker blew up")

def die(argv):
    sys.stdout.flush()
    os.kill(os.getpid(), 9)

TABLE = {"t-cat": cat, "t-who": who, "t-fail": fail, "t-boom": boom, "t-die": die}
for name in TABLE:
    registry.MODULES[name] = "cmd_kernel"
registry.resolve = TABLE.__getitem__
sys.exit(shimd.serve(sys.argv[1]))
"""

#: the fallback a client runs when there is no server: prints what it was asked
FALLBACK_SHIM = "import sys\nprint('fallback', *sys.argv[1:])\nsys.exit(7)\n"


def compiler() -> str:
    found = shutil.which("cc") or shutil.which("gcc")
    if found is None:
        pytest.skip("no C compiler: nodes keep their python wrappers (tested above)")
    return found


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Path]:
    """A client built for a socket in tmp_path (one copy per stand-in command), the server
    listening there, and a fallback shim; yields the directory of the commands."""
    sock, shim = tmp_path / "s.sock", tmp_path / "shim.py"
    shim.write_text(FALLBACK_SHIM)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    client = bin_dir / "t-cat"
    subprocess.run([compiler(), "-O2", "-Wall", "-Werror", f'-DSOCKET_PATH="{sock}"',
                    f'-DPYTHON="{sys.executable}"', f'-DSHIM="{shim}"', "-o", str(client),
                    str(shimd_client.SOURCE_PATH)], check=True, capture_output=True)
    for name in ("t-who", "t-fail", "t-boom", "t-die", "t-none", "reboot"):
        shutil.copy2(client, bin_dir / name)
    env = {**os.environ, "PYTHONPATH": str(Path(shimd.__file__).parents[3])}
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(sock)], env=env,
                              stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not sock.exists():
            assert server.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        yield bin_dir
    finally:
        server.kill()
        server.wait()


def run(bin_dir: Path, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bin_dir / argv[0]), *argv[1:]], input=stdin, capture_output=True,
                          text=True, timeout=30, cwd=bin_dir.parent,
                          env={"SHIMD_TEST": "passed", "PATH": "/usr/bin:/bin"}, check=False)


def test_stdin_stdout_reach_the_worker(rig: Path) -> None:
    result = run(rig, "t-cat", stdin="hello\nworld\n")
    assert (result.returncode, result.stdout, result.stderr) == (0, "HELLO\nWORLD\n", "")


def test_the_worker_takes_the_callers_cwd_umask_environment_and_argv(rig: Path) -> None:
    result = run(rig, "t-who", "a b", "")
    uid, gid, cwd, umask, rest = result.stdout.split(" ", 4)
    assert (uid, gid, cwd, umask) == ("0", "0", str(rig.parent), "0o22")
    assert rest == "passed /usr/local/bin/t-who a b \n"


@pytest.mark.parametrize("status", [0, 1, 3, 255])
def test_exit_status_and_both_streams_come_back(rig: Path, status: int) -> None:
    result = run(rig, "t-fail", str(status))
    assert (result.returncode, result.stdout, result.stderr) == (status, "to stdout\n", "to stderr\n")


def test_a_raising_command_answers_1_with_its_traceback(rig: Path) -> None:
    result = run(rig, "t-boom")
    assert result.returncode == 1
    assert "RuntimeError: worker blew up" in result.stderr and "Traceback" in result.stderr
    assert run(rig, "t-fail", "0").returncode == 0  # the server lives on


def test_a_worker_killed_by_a_signal_answers_128_plus_n(rig: Path) -> None:
    assert run(rig, "t-die").returncode == 128 + signal.SIGKILL
    assert run(rig, "t-fail", "4").returncode == 4


def test_an_unknown_command_answers_127(rig: Path) -> None:
    result = run(rig, "t-none")
    assert result.returncode == 127 and "no such node command: t-none" in result.stderr


def test_commands_the_server_must_not_run_fall_back_to_python(rig: Path) -> None:
    result = run(rig, "reboot", "now")
    assert (result.returncode, result.stdout) == (7, "fallback reboot now\n")


def test_without_a_server_the_client_falls_back_to_python(rig: Path) -> None:
    (rig.parent / "s.sock").unlink()
    result = run(rig, "t-fail", "x y")
    assert (result.returncode, result.stdout) == (7, "fallback t-fail x y\n")


def test_listen_replaces_an_earlier_servers_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")
    first = shimd.listen(path)
    first.close()  # a server gone, its socket left behind
    second = shimd.listen(path)
    try:
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["s.sock"]
    finally:
        second.close()


@pytest.mark.parametrize("kind", ["file", "directory", "link"])
def test_listen_keeps_what_is_not_a_socket(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "s.sock"
    other = tmp_path / "theirs"
    other.write_text("theirs")
    if kind == "file":
        target.write_text("theirs")
    elif kind == "directory":
        target.mkdir()
    else:
        target.symlink_to(other)
    with pytest.raises(FileExistsError, match="not a socket"):
        shimd.listen(str(target))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.sock", "theirs"]
    assert other.read_text() == "theirs"
    if kind == "file":
        assert target.read_text() == "theirs"
