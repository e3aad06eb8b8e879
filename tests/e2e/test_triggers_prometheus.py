"""Trigger 2 over real history: `sparkbase triggers --prometheus URL` against a real
Prometheus server (Debian's `prometheus` package, which ./scripts/bootstrap installs) whose
history `promtool tsdb create-blocks-from openmetrics` backfilled. Each test starts its own
server on 127.0.0.1 and stops it by its PID.

The backfilled series are what the DeepSeek lane exports, as Prometheus keeps them: SGLang's
scheduler gauges (the trigger's own metric names) of a TP4 batch over the four Sparks, every
TP rank exporting (`--enable-metrics-for-all-schedulers`), each node's scrape labelled with
its `instance` and `job`, one sample every 15 s.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ports import port_base

from sparkbase.cli.main import main

pytestmark = pytest.mark.end_to_end

REPO = Path(__file__).resolve().parents[2]
#: the servers' ports: one per test, from this base (127.0.0.1 only)
PORT_BASE = port_base("SPARKBASE_TEST_PROMETHEUS_PORT_BASE", 3411)
NODES = ("spark1", "spark2", "spark3", "spark4")
SCRAPE_SECONDS = 15
#: how long a started server may take to load its blocks and answer /-/ready
READY_SECONDS = 60.0
BOOTSTRAP = "./scripts/bootstrap installs Debian's prometheus package (prometheus and promtool); run it"


def binary(name: str) -> str:
    """The path of a Prometheus binary; a missing one fails the test (never a skip)."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"`{name}` is not installed: {BOOTSTRAP}")
    return path


#: (seconds into the hour) -> running requests and KV tokens in use of the one TP4 batch
Load = Callable[[int], tuple[int, int]]


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


class Server:
    """A Prometheus server over a backfilled directory, on 127.0.0.1:PORT."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.process = process
        self.url = url
        self.log = log


def start(tmp_path: Path, port: int, history: str | None) -> Server:
    """Backfill `history` (OpenMetrics; None: an empty server) and start Prometheus on it;
    wait until it is ready."""
    data = tmp_path / "data"
    data.mkdir()
    if history is not None:
        source = tmp_path / "history.om"
        source.write_text(history)
        made = subprocess.run([binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(source),
                               str(data)], capture_output=True, text=True, timeout=120, check=False)
        assert made.returncode == 0, made.stderr
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\n")  # scrapes nothing: the history is all it holds
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
        )
    server = Server(process, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"prometheus exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as answer:
                if answer.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    stop(server)
    pytest.fail(f"prometheus not ready within {READY_SECONDS:g} s: {log.read_text()[-2000:]}")


def stop(server: Server) -> None:
    """Stop the server this test started, by its PID."""
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(timeout=10)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[int, str | None], Server]]:
    """`prometheus(port_index, history)` -> a started server; every one is stopped after."""
    started: list[Server] = []

    def serve(index: int, history: str | None) -> Server:
        server = start(tmp_path / f"server{index}", PORT_BASE + index, history)
        started.append(server)
        return server

    for index in range(3):
        (tmp_path / f"server{index}").mkdir()
    yield serve
    for server in started:
        stop(server)


def triggers(capsys: pytest.CaptureFixture[str], *options: str) -> tuple[int, str, str]:
    """`sparkbase triggers` on the shipped site: exit status, stdout, stderr."""
    status = main(["triggers", "--site", str(REPO), *options])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _hour_end() -> int:
    """The last sample of a backfilled hour: half a minute ago (the query's window ends now)."""
    return int(time.time()) - 30


def four_long_sessions(_second: int) -> tuple[int, int]:
    """Four agent sessions of 550K tokens, all hour long."""
    return 4, 2_200_000


def brief_spikes(second: int) -> tuple[int, int]:
    """One long session, and for 2 minutes in every 15 four of them (8 minutes of 60)."""
    return (4, 2_200_000) if second % 900 < 120 else (1, 550_000)


def test_an_hour_of_four_long_sessions_fires(prometheus: Callable[[int, str | None], Server],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    server = prometheus(0, openmetrics(_hour_end(), 3600 + 60, four_long_sessions))
    status, out, err = triggers(capsys, "--prometheus", server.url)
    assert status == 1, out + err
    assert "FIRED   long-context-concurrency (session-load)" in out
    assert "evidence: 241 of 241 steps in the 60-minute window; 241 with more than 3 sessions" in out
    assert "peak concurrency 4, median 4" in out  # the TP group's four ranks are one batch
    asked = f"evidence: metrics source: --prometheus {server.url}: range queries of sglang:num_running_reqs,"
    assert asked in out
    assert "window_minutes 60: placeholder (site to decide" in out


def test_brief_spikes_stay_quiet(prometheus: Callable[[int, str | None], Server],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    server = prometheus(1, openmetrics(_hour_end(), 3600 + 60, brief_spikes))
    status, out, err = triggers(capsys, "--prometheus", server.url, "--json")
    assert status == 0, out + err
    session = next(t for t in json.loads(out)["triggers"] if t["kind"] == "session-load")
    assert session["status"] == "quiet", session["evidence"]
    first = session["evidence"][0]
    assert first.startswith("241 of 241 steps in the 60-minute window; ") and "fires at ≥50%" in first
    over = int(first.split("; ")[1].split(" ")[0])
    assert 30 <= over <= 40, first  # 8 minutes of 60 at 15 s steps, give or take a step per spike
    assert "peak concurrency 4, median 1" in session["evidence"][1]


def test_without_history_it_is_a_snapshot_not_sustained(prometheus: Callable[[int, str | None], Server],
                                                        capsys: pytest.CaptureFixture[str],
                                                        tmp_path: Path) -> None:
    """One scrape of the same four sessions: 'snapshot, not sustained', exit 4; a Prometheus
    that holds nothing of the window cannot judge it either (exit 4), nor can one holding only
    its last minutes; a Prometheus that is not there, or a URL that is not its API, is a clear
    error (exit 2, one line, no traceback)."""
    scrape = tmp_path / "scrape.prom"
    lines = [f'sglang:num_running_reqs{{instance="{node}:30000",tp_rank="{rank}"}} 4'
             for rank, node in enumerate(NODES)]
    lines += [f'sglang:num_used_tokens{{instance="{node}:30000",tp_rank="{rank}"}} 2200000'
              for rank, node in enumerate(NODES)]
    scrape.write_text("\n".join(lines) + "\n")
    status, out, _err = triggers(capsys, "--metrics", str(scrape))
    assert status == 4, out
    assert "UNKNOWN long-context-concurrency" in out
    assert "evidence: snapshot, not sustained: 1 sample time in the 60-minute window (one with more" in out

    empty = prometheus(0, None)
    status, out, _err = triggers(capsys, "--prometheus", empty.url)
    assert status == 4, out
    assert ("evidence: no sglang:num_running_reqs or vllm:num_requests_running samples with KV-cache usage "
            "in the window") in out

    end = _hour_end()
    recent = prometheus(1, openmetrics(end, 5 * 60, four_long_sessions))
    status, out, _err = triggers(capsys, "--prometheus", recent.url)
    assert status == 4, out
    assert "of 241 sample times of the window; could tip the verdict: not judged" in out

    status, out, err = triggers(capsys, "--prometheus", f"{empty.url}/no-such-prefix")
    assert status == 2 and out == ""
    assert err.startswith(f"sparkbase: prometheus: {empty.url}/no-such-prefix (") and "HTTP status 404" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    stop(empty)
    status, out, err = triggers(capsys, "--prometheus", empty.url)
    assert status == 2 and "cannot fetch" in err and err.count("\n") == 1, err
