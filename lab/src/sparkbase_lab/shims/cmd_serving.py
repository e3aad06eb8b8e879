"""A lane's serving process in a node: started and stopped by `systemctl` as its unit would.

A unit marked `X-SparkbaseLab=serving` in its `[Service]` section is run, not just marked
active: `start_unit` spawns its `ExecStart=` with its `Environment=` (as systemd would),
waits until the stand-in has mapped its NCCL library and listens, and records PID and
start time in /run/sparkbase-lab/serving/UNIT.json; `stop_unit` ends only that process.

The stand-in (`python3 shim.py __serve__ ARGS...`, `serve`) maps the file `SPARKBASE_LAB_NCCL`
names, as a process that loaded that libnccl, starts its workers as a real engine does
(SGLang's TP workers, vLLM's `multiprocessing` spawns: `shim.py __worker__
--multiprocessing-fork`, command lines without the lane's match strings, each mapping the
same libnccl; `SPARKBASE_LAB_WORKERS` of them, default 2), and serves Prometheus text on
127.0.0.1:`SPARKBASE_LAB_METRICS_PORT` (the engine's gauges, all zero: no load; four
500K-class sessions under fault `lane-sessions`, read at each scrape).

No systemd runs and the machine's CPUs are not the GB10's, so the serving slice is
emulated from the node's own accounting: the unit's `Slice=` and that slice's
`AllowedCPUs=` are bound over the process's /proc/PID/status (Cpus_allowed lines) and
/proc/PID/cgroup (`0::/…/SLICE/UNIT`) inside the node's mount namespace.

Faults (firmware faults.json, read at start): `lane-env` adds NCCL_IB_MERGE_NICS=1 to the
environment; `lane-worker-env` has the server set NCCL_IB_MERGE_NICS=1 in itself (os.environ,
after start: not in its /proc/PID/environ) before it starts its workers, which inherit it;
`lane-conf-twice` points NCCL_CONF_FILE at a file setting NCCL_IB_MERGE_NICS twice (1, then
0: NCCL uses 1); `lane-private-nccl` maps an image-private /opt/lane-image/lib/libnccl.so.2;
`lane-outside-slice` starts the process without the slice (the machine's own view).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from sparkbase_lab.shims.common import RUN, faults, read_json, read_text, write_json, write_text

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable

SERVING = f"{RUN}/serving"
MARK = "X-SparkbaseLab=serving"
IMAGE_LIB = "/opt/lane-image/lib/"
PRIVATE_NCCL = IMAGE_LIB + "libnccl.so.2"
#: what the server sets in itself before starting its workers under fault `lane-worker-env`
WORKER_ENV = {"NCCL_IB_MERGE_NICS": "1"}
#: the user nccl.conf of fault `lane-conf-twice`: the key twice, NCCL takes the first (1)
CONF_TWICE = "NCCL_IB_MERGE_NICS=1\nNCCL_IB_MERGE_NICS=0\n"


def is_serving_unit(path: str) -> bool:
    """Whether the unit file asks the lab to run its ExecStart."""
    return any(line.strip() == MARK for line in read_text(path).splitlines())


def _service_values(path: str, key: str) -> list[str]:
    return [line.partition("=")[2].strip() for line in read_text(path).splitlines()
            if line.strip().startswith(key + "=")]


def _environment(path: str) -> dict[str, str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    for value in _service_values(path, "Environment"):
        for word in value.split():
            key, sep, val = word.strip('"').partition("=")
            if sep:
                env[key] = val
    return env


def _start_time(pid: int) -> int | None:
    text = read_text(f"/proc/{pid}/stat")
    return int(text[text.rindex(")") + 2 :].split()[19]) if text else None


def _record(unit: str) -> str:
    return f"{SERVING}/{unit}.json"


def running_pid(unit: str) -> int | None:
    """The PID of the unit's stand-in if it still runs (same PID and start time)."""
    data = read_json(_record(unit), None)
    if not data:
        return None
    pid = int(data["pid"])
    return pid if _start_time(pid) == int(data["start"]) else None


def start_unit(unit: str, path: str, slice_cpus: Callable[[str], str]) -> None:
    """Run the unit's ExecStart as its stand-in process (nothing when it already runs).

    `slice_cpus(SLICE)` is the slice's `AllowedCPUs=` as `systemctl show` prints it: systemctl
    (`cmd_systemd`), which starts units, passes it, so this module never imports it back.
    """
    if running_pid(unit) is not None:
        return
    active_faults = faults()
    env = _environment(path)
    if active_faults.get("lane-env"):
        env["NCCL_IB_MERGE_NICS"] = "1"
    if active_faults.get("lane-worker-env"):
        env["SPARKBASE_LAB_WORKER_ENV"] = " ".join(f"{k}={v}" for k, v in WORKER_ENV.items())
    if active_faults.get("lane-conf-twice"):
        conf = f"{SERVING}/{unit}.nccl.conf"
        write_text(conf, CONF_TWICE)
        env["NCCL_CONF_FILE"] = conf
    image_library = env.get("SPARKBASE_LAB_NCCL", "")
    if image_library.startswith(IMAGE_LIB) and not os.path.exists(image_library):
        # a baseline whose NCCL is built into the lane's image (provided_by: image)
        os.makedirs(IMAGE_LIB, exist_ok=True)
        write_text(image_library, "the NCCL built into the lane's image (lab stand-in)\n")
    if active_faults.get("lane-private-nccl"):
        os.makedirs(os.path.dirname(PRIVATE_NCCL), exist_ok=True)
        write_text(PRIVATE_NCCL, "an image-private NCCL the container ships (lab stand-in)\n")
        env["SPARKBASE_LAB_NCCL"] = PRIVATE_NCCL
    os.makedirs(SERVING, exist_ok=True)
    ready = f"{SERVING}/{unit}.ready"
    if os.path.exists(ready):
        os.unlink(ready)
    env["SPARKBASE_LAB_READY"] = ready
    env.setdefault("SPARKBASE_LAB_BUILD", unit)  # the engine build its API answers as (openai_api.py)
    argv = _service_values(path, "ExecStart")[0].split()
    log = open(f"{SERVING}/{unit}.log", "ab")  # noqa: SIM115  # handed to the child
    child = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True, close_fds=True)
    log.close()
    deadline = time.monotonic() + 10
    while not os.path.exists(ready) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    start = _start_time(child.pid)
    workers = [int(word) for word in read_text(ready).split()[1:] if word.isdigit()]
    write_json(_record(unit), {"pid": child.pid, "start": start or 0, "workers": workers})
    slices = _service_values(path, "Slice")
    if slices and not active_faults.get("lane-outside-slice"):
        for pid in (child.pid, *workers):
            _emulate_slice(pid, unit, slices[0], slice_cpus(slices[0]))


def _slice_path(slice_unit: str) -> str:
    """systemd's cgroup path of a slice: `a-b.slice` lives in `a.slice/a-b.slice`."""
    parts = slice_unit[: -len(".slice")].split("-")
    return "/" + "/".join("-".join(parts[: i + 1]) + ".slice" for i in range(len(parts)))


def _emulate_slice(pid: int, unit: str, slice_unit: str, allowed: str) -> None:
    """Bind the slice's view over the process's status and cgroup (node mount namespace)."""
    status = read_text(f"/proc/{pid}/status")
    if allowed:
        cpus = allowed.replace(" ", ",")
        lines = [f"Cpus_allowed_list:\t{cpus}" if line.startswith("Cpus_allowed_list:") else line
                 for line in status.splitlines()]
        status = "\n".join(lines) + "\n"
    files = {"status": status, "cgroup": f"0::{_slice_path(slice_unit)}/{unit}\n"}
    for name, text in files.items():
        source = f"{SERVING}/{pid}.{name}"
        write_text(source, text)
        subprocess.run(["mount", "--bind", source, f"/proc/{pid}/{name}"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_unit(unit: str) -> None:
    """End the unit's stand-in (only the process recorded for it) and undo its binds."""
    pid = running_pid(unit)
    if pid is not None:
        workers = [int(w) for w in (read_json(_record(unit), {}) or {}).get("workers", [])]
        for each in (pid, *workers):
            for name in ("status", "cgroup"):
                subprocess.run(["umount", "-l", f"/proc/{each}/{name}"], check=False,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.kill(pid, signal.SIGTERM)  # the server ends its workers
        deadline = time.monotonic() + 5
        while _start_time(pid) is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        if _start_time(pid) is not None:
            os.kill(pid, signal.SIGKILL)
    for leftover in (_record(unit), f"{SERVING}/{unit}.ready", f"{SERVING}/{unit}.nccl.conf"):
        if os.path.exists(leftover):
            os.unlink(leftover)


GAUGES = {
    "sglang": ("sglang:num_running_reqs", "sglang:num_used_tokens"),
    "vllm": ("vllm:num_requests_running", "vllm:kv_cache_usage_perc"),
}
#: the gauges' values under fault `lane-sessions`: four 500K-class sessions among the running
#: requests (SGLang: KV tokens in use; vLLM: used fraction of the 3,000,000-token cache below)
SESSIONS = {
    "sglang": (6.0, 2150000.0),
    "vllm": (5.0, 0.72),
}
#: vLLM's cache info gauge (labels as vllm/v1/metrics/loggers.py writes them): 187,500 blocks
#: of 16 tokens, what turns the used fraction into tokens
VLLM_CACHE_INFO = 'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="187500"} 1.0'


def metrics_text(engine: str, sessions: bool = False, running: float = 0.0) -> str:
    """Prometheus text of the engine: idle (every gauge zero), or with four long sessions;
    `running` requests of its API (openai_api.py) are added to the running gauge."""
    lines = []
    values = SESSIONS.get(engine, (0.0, 0.0)) if sessions else (0.0, 0.0)
    values = (values[0] + running, values[1])
    for name, value in zip(GAUGES.get(engine, ()), values, strict=False):
        lines += [f"# TYPE {name} gauge", f"{name} {value}"]
    if engine == "vllm":
        lines += ["# TYPE vllm:cache_config_info gauge", VLLM_CACHE_INFO]
    return "\n".join(lines) + "\n"


def lab_setting(env_key: str, key: str) -> str:
    """A setting the lab hands the stand-in: from its environment (a lab lane unit's
    `Environment=`), else from the file a container's launcher wrote for this process or,
    for a worker, for its server (a container's environment holds only what a real one
    holds: docker_runtime.py)."""
    if env_key in os.environ:
        return os.environ[env_key]
    from sparkbase_lab.shims.docker_runtime import lab_settings

    for pid in (os.getpid(), os.getppid()):
        settings = lab_settings(pid)
        if settings:
            value = settings.get(key)
            return "" if value is None else str(value)
    return ""


def _map_library() -> list[object]:
    """Map the file SPARKBASE_LAB_NCCL names, as a process that loaded that libnccl."""
    import mmap

    library = lab_setting("SPARKBASE_LAB_NCCL", "nccl")
    if not library or not os.path.isfile(library):
        return []
    with open(library, "rb") as handle:
        return [mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ)]


def _start_workers() -> list[subprocess.Popen[str]]:
    """The engine's workers: `SPARKBASE_LAB_WORKERS` processes started as `multiprocessing`
    spawns are, each ready once it has mapped the library. Under `lane-worker-env` the
    server first sets WORKER_ENV in itself (after its start: its /proc/PID/environ does not
    show it), and the workers inherit it."""
    for word in os.environ.get("SPARKBASE_LAB_WORKER_ENV", "").split():
        key, _, value = word.partition("=")
        os.environ[key] = value
    workers = []
    for rank in range(int(os.environ.get("SPARKBASE_LAB_WORKERS", "2"))):
        argv = [sys.executable, "-S", os.path.abspath(sys.argv[0]), "__worker__", f"--rank={rank}",
                "--multiprocessing-fork"]
        worker = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                                  close_fds=True)
        if worker.stdout is not None:
            worker.stdout.readline()
        workers.append(worker)
    return workers


def worker(_argv: list[str]) -> int:
    """A worker of the stand-in: map the library, say so, live until the server ends."""
    mapped = _map_library()
    server = os.getppid()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready", flush=True)
    while os.getppid() == server:
        time.sleep(0.2)
    del mapped
    return 0


def _option(argv: list[str], flag: str, default: str) -> str:
    """The value after `flag` on the engine's command line."""
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else default


def models_json(argv: list[str], engine: str) -> str:
    """`GET /v1/models` as the engine answers it (SGLang: one model, `owned_by` sglang,
    `root` and `max_model_len`, compact JSON: tests/fixtures/real/v1_models__sglang_*)."""
    import json

    model = _option(argv, "--model-path", _option(argv, "serve", "model"))
    served = _option(argv, "--served-model-name", model)
    card = {"id": served, "object": "model", "created": int(time.time()), "owned_by": engine,
            "root": model, "parent": None, "max_model_len": int(_option(argv, "--context-length", "1048576"))}
    return json.dumps({"object": "list", "data": [card]}, separators=(",", ":"))


def serve(argv: list[str]) -> int:
    """The stand-in serving process: map the NCCL library, start the workers, serve
    /metrics, `/v1/models`, `/health` and the rest of the OpenAI-compatible API (openai_api.py:
    `/v1/completions`) until SIGTERM (which ends the workers too). With no port from the lab it
    serves nothing, as an engine's non-head rank does."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from sparkbase_lab.shims import openai_api

    mapped = _map_library()
    engine = "sglang" if any("sglang" in arg for arg in argv) else "vllm"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name for a GET handler
            body, kind, status = b"", "text/plain; version=0.0.4", 200
            if self.path == "/metrics":  # the load as the node's faults say now, its own requests too
                sessions = bool(faults().get("lane-sessions"))
                body = metrics_text(engine, sessions, openai_api.running()).encode()
            elif self.path == "/v1/models":
                body, kind = models_json(argv, engine).encode(), "application/json"
            elif self.path != "/health":
                status = 404
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # http.server's name for a POST handler (/v1/completions)
            openai_api.post(self, engine, argv)

        def log_message(self, *_args: object) -> None:
            return

    port = lab_setting("SPARKBASE_LAB_METRICS_PORT", "port")
    server = ThreadingHTTPServer(("127.0.0.1", int(port)), Handler) if port else None
    if server is not None:
        server.daemon_threads = True  # a request still streaming never holds the stand-in's end
    workers = _start_workers()

    def end(*_: object) -> None:
        for each in workers:
            each.terminate()
        for each in workers:
            each.wait(timeout=5)
        sys.exit(0)

    signal.signal(signal.SIGTERM, end)
    ready = lab_setting("SPARKBASE_LAB_READY", "ready")
    if ready:
        write_text(ready, f"{os.getpid()} {' '.join(str(w.pid) for w in workers)}\n")
    if server is not None:
        server.serve_forever()
    while True:
        signal.pause()
    del mapped
    return 0


#: `shim.py __serve__ ARGS...`: the stand-in process a lab lane unit's ExecStart runs
COMMANDS = {"__serve__": serve, "__worker__": worker}
