"""A container's processes in a node: started, stopped and restarted at boot as dockerd would.

`start` runs the container's command as the lab's serving stand-in in a mount namespace of
its own: `unshare --mount --propagation private python3 shim.py __container__ ID`, which
(`launch`) mounts what the container sees there and then execs `python3 -S shim.py
__serve__ ARGS...` with the container's environment and nothing else (`HOSTNAME`, the
container's `Config.Env`, then `HOME`, as dockerd and runc hand it over), so one PID runs
from start to end and `/proc/PID/environ` holds what a real container process holds:

- every `-v SRC:DST[:ro]` is a bind in that namespace (read-only for `ro`), so the host sees
  the process map DST in `/proc/PID/maps` and reads it through `/proc/PID/root/DST`, as
  with a real container; a DST the node does not have is made in an overlay (upper dir in
  /run) over its nearest existing directory, which only the container sees;
- the image's own libnccl (`nccl_path` in the catalogue) is there as the image ships it,
  unless a bind covers it: that file is what the stand-in maps (`SPARKBASE_LAB_NCCL` of the
  serving stand-in, handed over in a file under /run, never in the environment).

From the node, each of its processes (the server and its workers) shows the cgroup Docker's
systemd driver gives it (`0::/system.slice/docker-<id>.scope`, bound over
/proc/PID/cgroup) and, with `--cpuset-cpus`, those CPUs (`Cpus_allowed_list`, bound over
/proc/PID/status). The stand-in listens (metrics and the OpenAI-compatible API) only where
the engine would: on SGLang's node rank 0, at the node's SSH port + METRICS_PORT_OFFSET (the
nodes share the machine's loopback, as lab lanes do).
"""

from __future__ import annotations

import os

from sparkbase_lab.shims.common import RUN, node_info, read_json, read_text, write_json, write_text
from sparkbase_lab.shims.docker_images import build_of
from sparkbase_lab.shims.docker_state import ZERO_TIME, now_rfc3339, split_bind

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

SHIM = "/usr/local/lib/sparkbase-lab/shim.py"
RUNTIME = f"{RUN}/docker"
#: the lab's interface for lane metrics: SSH port + this (sparkbase.transport.targets'
#: LAB_METRICS_PORT_OFFSET; a unit test keeps the two equal)
METRICS_PORT_OFFSET = 400
#: how long `docker stop` waits after SIGTERM before SIGKILL (docker's default, seconds)
STOP_TIMEOUT = 10.0


def _start_time(pid: int) -> int | None:
    text = read_text(f"/proc/{pid}/stat")
    return int(text[text.rindex(")") + 2 :].split()[19]) if text else None


def alive(record: dict[str, Any]) -> bool:
    """Whether the container's main process still runs (same PID and start time)."""
    state = record["state"]
    return bool(state.get("pid")) and _start_time(int(state["pid"])) == state.get("start")


def cgroup_path(container_id: str) -> str:
    """The container's cgroup under Docker's systemd cgroup driver (cgroup v2)."""
    return f"/system.slice/docker-{container_id}.scope"


def process_env(record: dict[str, Any]) -> dict[str, str]:
    """The main process's environment: HOSTNAME, then Config.Env, then HOME when unset, and the
    lab's engine build (openai_api.py): the image's (`docker_images.build_of`), never shown in
    `docker inspect`, unless Config.Env names one."""
    env = {"HOSTNAME": record["hostname"]}
    for item in record["env"]:
        key, _, value = item.partition("=")
        env[key] = value
    env.setdefault("HOME", "/root")
    env.setdefault("SPARKBASE_LAB_BUILD", build_of(record["image_id"]))
    return env


def _listen_port(args: list[str]) -> int | None:
    """Where the stand-in listens: SGLang's HTTP server runs on node rank 0 only."""
    if "--node-rank" in args:
        index = args.index("--node-rank")
        if index + 1 < len(args) and args[index + 1] != "0":
            return None
    port = node_info().get("port")
    return int(port) + METRICS_PORT_OFFSET if port else None


def start(record: dict[str, Any], image: dict[str, Any] | None) -> None:
    """Start the container's main process (and its workers); update `record["state"]`."""
    import subprocess
    import time

    cid = record["id"]
    where = f"{RUNTIME}/{cid}"
    os.makedirs(where, exist_ok=True)
    for bind in record["binds"]:
        source = split_bind(bind)[0]
        if not os.path.exists(source):  # `-v` makes a missing source directory, as docker does
            os.makedirs(source, exist_ok=True)
    ready = f"{where}/ready"
    if os.path.exists(ready):
        os.unlink(ready)
    write_json(f"{where}/launch.json", {
        "binds": record["binds"],
        "nccl_path": (image or {}).get("nccl_path", ""),
        "nccl_bytes": (image or {}).get("nccl_bytes", b"").decode(),
        "argv": [record["path"], *record["args"]],
        "port": _listen_port([record["path"], *record["args"]]),
        "ready": ready,
        "env": [f"{key}={value}" for key, value in process_env(record).items()],  # in order
    })
    log = open(f"{where}/output.log", "ab")  # noqa: SIM115  # handed to the child
    argv = ["unshare", "--mount", "--propagation", "private",
            "/usr/bin/python3", "-IS", SHIM, "__container__", cid]
    child = subprocess.Popen(argv, env=process_env(record), stdin=subprocess.DEVNULL, stdout=log,
                             stderr=log, start_new_session=True, close_fds=True, cwd="/")
    log.close()
    deadline = time.monotonic() + 15
    while not os.path.exists(ready) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    state = record["state"]
    if not os.path.exists(ready):
        state.update(status="exited", pid=0, start=0, workers=[], exit_code=child.poll() or 1,
                     finished_at=now_rfc3339())
        return
    workers = [int(word) for word in read_text(ready).split()[1:] if word.isdigit()]
    state.update(status="running", pid=child.pid, start=_start_time(child.pid) or 0, workers=workers,
                 exit_code=0, started_at=now_rfc3339(), finished_at=state.get("finished_at") or ZERO_TIME)
    for pid in (child.pid, *workers):
        _emulate_cgroup(pid, cid, record["cpuset"])


def _emulate_cgroup(pid: int, container_id: str, cpuset: str) -> None:
    """Bind the container's cgroup (and cpuset) over the process's /proc files, in the
    node's mount namespace (what the host sees)."""
    import subprocess

    files = {"cgroup": f"0::{cgroup_path(container_id)}\n"}
    if cpuset:
        status = read_text(f"/proc/{pid}/status")
        cpus = ",".join(cpuset.split())
        files["status"] = "".join(f"Cpus_allowed_list:\t{cpus}\n" if line.startswith("Cpus_allowed_list:")
                                  else line + "\n" for line in status.splitlines())
    for name, text in files.items():
        source = f"{RUNTIME}/{container_id}/{pid}.{name}"
        write_text(source, text)
        subprocess.run(["mount", "--bind", source, f"/proc/{pid}/{name}"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(record: dict[str, Any], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM the main process (the stand-in ends its workers), SIGKILL after `timeout`;
    undo the /proc binds; record the exit."""
    import signal
    import subprocess
    import time

    state = record["state"]
    if alive(record):
        pid = int(state["pid"])
        for each in (pid, *state.get("workers", [])):
            for name in ("status", "cgroup"):
                subprocess.run(["umount", "-l", f"/proc/{each}/{name}"], check=False,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _start_time(pid) == state["start"] and time.monotonic() < deadline:
            time.sleep(0.02)
        code = 0
        if _start_time(pid) == state["start"]:
            os.kill(pid, signal.SIGKILL)
            code = 137
        state["exit_code"] = code
        forget(pid)
    state.update(status="exited", pid=0, start=0, workers=[], finished_at=now_rfc3339())


def forget(pid: int) -> None:
    """Drop what `launch` handed the process with `pid`."""
    path = f"{RUNTIME}/pid/{pid}.json"
    if os.path.exists(path):
        os.unlink(path)


def discard(record: dict[str, Any]) -> None:
    """Drop a removed container's runtime files (its overlay upper dirs among them)."""
    import shutil

    shutil.rmtree(f"{RUNTIME}/{record['id']}", ignore_errors=True)


def settle(record: dict[str, Any]) -> bool:
    """A record that says running whose process is gone becomes exited (137: killed);
    whether it changed."""
    state = record["state"]
    if state["status"] == "running" and not alive(record):
        state.update(status="exited", pid=0, start=0, workers=[], exit_code=137, finished_at=now_rfc3339())
        return True
    return False


# --- inside the container's mount namespace -------------------------------------------------

def _deepest_existing(path: str) -> str:
    while path != "/" and not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def _overlay(directory: str, cid: str) -> None:
    """An overlay over `directory` whose upper dir is the container's (in /run): what is made
    under it is the container's only."""
    import subprocess

    key = directory.strip("/").replace("/", "_") or "root"
    upper, work = f"{RUNTIME}/{cid}/overlay/{key}/upper", f"{RUNTIME}/{cid}/overlay/{key}/work"
    os.makedirs(upper, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir={directory},upperdir={upper},workdir={work}", directory], check=True)


def _provide(path: str, is_dir: bool, cid: str, overlaid: set[str]) -> None:
    """Make `path` exist in this namespace only (an overlay over its nearest existing
    directory, once per directory)."""
    if os.path.exists(path):
        return
    base = _deepest_existing(os.path.dirname(path))
    if base == "/":
        raise RuntimeError(f"cannot make {path} for the container: no directory to overlay")
    if not any(base == d or base.startswith(d + "/") for d in overlaid):
        _overlay(base, cid)
        overlaid.add(base)
    if is_dir:
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_text(path, "")


def launch(argv: list[str]) -> int:
    """`shim.py __container__ ID` (run by `unshare`, in the container's mount namespace):
    the image's files and the binds, then exec the serving stand-in as the same PID."""
    import subprocess

    cid = argv[0]
    plan: dict[str, Any] = read_json(f"{RUNTIME}/{cid}/launch.json", {})
    overlaid: set[str] = set()
    nccl_path = plan.get("nccl_path") or ""
    if nccl_path:
        existed = os.path.exists(nccl_path)
        _provide(nccl_path, False, cid, overlaid)
        if not existed:
            write_text(nccl_path, plan.get("nccl_bytes") or "")
    for bind in plan.get("binds", []):
        source, destination, mode = split_bind(bind)
        _provide(destination, os.path.isdir(source), cid, overlaid)
        subprocess.run(["mount", "--bind", source, destination], check=True)
        if "ro" in mode.split(","):
            subprocess.run(["mount", "-o", "remount,bind,ro", destination], check=True)
    write_json(f"{RUNTIME}/pid/{os.getpid()}.json", {
        "nccl": nccl_path, "port": plan.get("port"), "ready": plan.get("ready", ""),
    })
    command = [str(word) for word in plan.get("argv", [])]
    if command and os.path.basename(command[0]).startswith("python"):
        command = command[1:]  # the stand-in is the python; the engine's arguments follow
    # the container's environment exactly (this launcher's python added LC_CTYPE to its own)
    env = dict(item.partition("=")[::2] for item in plan.get("env", []))
    argv_ = ["/usr/bin/python3", "-S", SHIM, "__serve__", *command]
    os.execve(argv_[0], argv_, env)  # noqa: S606 (become the stand-in, as runc execs the container's process)
    return 1  # not reached


def lab_settings(pid: int) -> dict[str, Any]:
    """What `launch` handed the stand-in with PID `pid` (empty when none)."""
    data: dict[str, Any] = read_json(f"{RUNTIME}/pid/{pid}.json", {})
    return data
