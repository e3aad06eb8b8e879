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
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ports import port_base

from sparkbase.cli.main import main
from sparkbase_lab.prometheus import (
    NODES,
    PrometheusError,
    Server,
    brief_spikes,
    four_long_sessions,
    hour_end,
    openmetrics,
    start,
)

pytestmark = pytest.mark.end_to_end

REPO = Path(__file__).resolve().parents[2]
#: the servers' ports: one per test, from this base (127.0.0.1 only)
PORT_BASE = port_base("SPARKBASE_TEST_PROMETHEUS_PORT_BASE", 3411)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[int, str | None], Server]]:
    """`prometheus(port_index, history)` -> a started server; every one is stopped after."""
    started: list[Server] = []

    def serve(index: int, history: str | None) -> Server:
        try:  # a missing binary or a server that does not start fails the test (never a skip)
            server = start(tmp_path / f"server{index}", PORT_BASE + index, history)
        except PrometheusError as exc:
            pytest.fail(str(exc))
        started.append(server)
        return server

    yield serve
    for server in started:
        server.stop()


def triggers(capsys: pytest.CaptureFixture[str], *options: str) -> tuple[int, str, str]:
    """`sparkbase triggers` on the shipped site: exit status, stdout, stderr."""
    status = main(["triggers", "--site", str(REPO), *options])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_an_hour_of_four_long_sessions_fires(prometheus: Callable[[int, str | None], Server],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    server = prometheus(0, openmetrics(hour_end(), 3600 + 60, four_long_sessions))
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
    server = prometheus(1, openmetrics(hour_end(), 3600 + 60, brief_spikes))
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

    end = hour_end()
    recent = prometheus(1, openmetrics(end, 5 * 60, four_long_sessions))
    status, out, _err = triggers(capsys, "--prometheus", recent.url)
    assert status == 4, out
    assert "of 241 sample times of the window; could tip the verdict: not judged" in out

    status, out, err = triggers(capsys, "--prometheus", f"{empty.url}/no-such-prefix")
    assert status == 2 and out == ""
    assert err.startswith(f"sparkbase: prometheus: {empty.url}/no-such-prefix (") and "HTTP status 404" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    empty.stop()
    status, out, err = triggers(capsys, "--prometheus", empty.url)
    assert status == 2 and "cannot fetch" in err and err.count("\n") == 1, err
