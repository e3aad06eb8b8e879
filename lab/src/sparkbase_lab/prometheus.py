"""The site's Prometheus, emulated: a real Prometheus server (Debian's `prometheus` package,
which ./scripts/bootstrap installs) on 127.0.0.1 holding an hour of the DeepSeek lane's
history, backfilled with `promtool tsdb create-blocks-from openmetrics`.

The history is what the lane exports, as Prometheus keeps it: SGLang's scheduler gauges (the
session-load trigger's own metric names) of a TP4 batch over the four Sparks, every TP rank
exporting (`--enable-metrics-for-all-schedulers`), each node's scrape labelled with its
`instance` and `job`, one sample every 15 s. The e2e tier and the demo start it; each stops
the server it started, by its PID.

    python -m sparkbase_lab.prometheus DIR PORT four-long-sessions|brief-spikes|empty

runs one in the foreground (the demo's way) until it is sent SIGTERM.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

NODES = ("spark1", "spark2", "spark3", "spark4")
SCRAPE_SECONDS = 15
#: how long a started server may take to load its blocks and answer /-/ready
READY_SECONDS = 60.0
BOOTSTRAP = "./scripts/bootstrap installs Debian's prometheus package (prometheus and promtool); run it"

#: (seconds into the history) -> running requests and KV tokens in use of the one TP4 batch
Load = Callable[[int], tuple[int, int]]


class PrometheusError(RuntimeError):
    """The server could not be made or started (the message says why, with its log's end)."""


def four_long_sessions(_second: int) -> tuple[int, int]:
    """Four agent sessions of 550K tokens, all hour long."""
    return 4, 2_200_000


def brief_spikes(second: int) -> tuple[int, int]:
    """One long session, and for 2 minutes in every 15 four of them (8 minutes of 60)."""
    return (4, 2_200_000) if second % 900 < 120 else (1, 550_000)


#: the histories a server can be started with, by name (`empty`: no history at all)
HISTORIES: dict[str, Load | None] = {
    "four-long-sessions": four_long_sessions,
    "brief-spikes": brief_spikes,
    "empty": None,
}


def hour_end() -> int:
    """The last sample of a backfilled hour: half a minute ago (a query's window ends now)."""
    return int(time.time()) - 30


def openmetrics(end: int, seconds: int, load: Load) -> str:
    """OpenMetrics text of the lane's two SGLang gauges over `seconds` ending at `end`: each
    node's TP rank (instance NODE:30000) reports the batch's figures, as all schedulers of a
    TP group do."""
    families = {"sglang:num_running_reqs": 0, "sglang:num_used_tokens": 1}
    lines: list[str] = []
    for metric, which in families.items():
        lines += [f"# HELP {metric} {metric} of the scheduler.", f"# TYPE {metric} gauge"]
        for rank, node in enumerate(NODES):
            labels = (f'engine_type="unified",instance="{node}:30000",job="sglang",'
                      f'model_name="deepseek-v4.1-flash",pp_rank="0",tp_rank="{rank}"')
            for at in range(end - seconds, end + 1, SCRAPE_SECONDS):
                lines.append(f"{metric}{{{labels}}} {load(at - (end - seconds))[which]} {at}")
    return "\n".join([*lines, "# EOF"]) + "\n"


def binary(name: str) -> str:
    """The path of a Prometheus binary."""
    path = shutil.which(name)
    if path is None:
        raise PrometheusError(f"`{name}` is not installed: {BOOTSTRAP}")
    return path


@dataclass
class Server:
    """A Prometheus server over a backfilled directory, on 127.0.0.1:PORT."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        """Stop this server (the one started here), by its PID."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start(directory: Path, port: int, history: str | None) -> Server:
    """Backfill `history` (OpenMetrics; None: an empty server) into `directory` and start
    Prometheus on it, listening on 127.0.0.1:`port` only; wait until it is ready."""
    data = directory / "data"
    data.mkdir(parents=True)
    if history is not None:
        source = directory / "history.om"
        source.write_text(history)
        made = subprocess.run([binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(source),
                               str(data)], capture_output=True, text=True, timeout=120, check=False)
        if made.returncode != 0:
            raise PrometheusError(f"promtool could not backfill the history: {made.stderr[-2000:]}")
    config = directory / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\n")  # scrapes nothing: the history is all it holds
    log = directory / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT, cwd=directory,
        )
    server = Server(process, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise PrometheusError(f"prometheus exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            # the URL is built here: http on 127.0.0.1 only
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as answer:  # noqa: S310
                if answer.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    server.stop()
    raise PrometheusError(f"prometheus not ready within {READY_SECONDS:g} s: {log.read_text()[-2000:]}")


def serve(directory: Path, port: int, name: str) -> int:
    """Start a server with the named history (an hour and a minute of it, ending now), say
    its URL on stdout, and keep it until SIGTERM or SIGINT; then stop it."""
    load = HISTORIES[name]
    history = None if load is None else openmetrics(hour_end(), 3600 + 60, load)
    server = start(directory, port, history)
    print(server.url, flush=True)
    stopping: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: stopping.append(number))
    while not stopping and server.process.poll() is None:
        time.sleep(0.2)
    server.stop()
    return 0


def main(argv: list[str]) -> int:
    """`python -m sparkbase_lab.prometheus DIR PORT HISTORY` (see the module docstring)."""
    if len(argv) != 3 or argv[2] not in HISTORIES or not argv[1].isdigit():
        names = "|".join(HISTORIES)
        print(f"usage: python -m sparkbase_lab.prometheus DIR PORT {{{names}}}", file=sys.stderr)
        return 2
    try:
        return serve(Path(argv[0]), int(argv[1]), argv[2])
    except PrometheusError as exc:
        print(f"prometheus: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
