"""Re-open triggers: session load from saved scrapes and a local server, kernel pin from the contract."""

from __future__ import annotations

import http.server
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from sparkbase.cli.main import main
from sparkbase.gate import metrics as metrics_module
from sparkbase.gate.metrics import (
    MAX_SAMPLES,
    MetricsError,
    Sample,
    load_metrics,
    parse_scrapes,
    shown_source,
)
from sparkbase.gate.triggers import FIRED, QUIET, UNKNOWN, evaluate
from sparkbase.model.site import Site, load_site
from sparkbase.model.site_rules import SessionLoadTrigger
from sparkbase.text import is_hidden

REPO = Path(__file__).parents[2]
METRICS = REPO / "tests" / "fixtures" / "metrics"
FOUR = METRICS / "four-500k-sessions.prom"
TWO = METRICS / "two-500k-sessions.prom"


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(REPO)


def _verdict(site: Site, path: Path, trigger: str = "long-context-concurrency") -> tuple[str, list[str]]:
    samples = parse_scrapes(path.read_text(), 0.0)
    verdict = next(v for v in evaluate(site, samples) if v.id == trigger)
    return verdict.status, verdict.evidence


VLLM_FOUR = METRICS / "vllm-four-500k-sessions.prom"
NO_ENGINE = METRICS / "no-engine-metrics.prom"


def test_four_concurrent_500k_sessions_fire(site: Site) -> None:
    """SGLang with every TP rank exporting: the TP group's one KV cache is counted once."""
    status, evidence = _verdict(site, FOUR)
    assert status == FIRED
    assert "13 sample time(s)" in evidence[0] and "9 with more than 3 sessions" in evidence[0]
    assert "peak concurrency 4" in evidence[1]
    assert "sglang engine_type=unified,model_name=deepseek-v4.1-flash" in evidence[2]


def test_two_concurrent_500k_sessions_do_not(site: Site) -> None:
    status, evidence = _verdict(site, TWO)
    assert status == QUIET
    assert "peak concurrency 2" in evidence[1]


def test_vllm_sessions_from_cache_usage_and_cache_size(site: Site) -> None:
    """0.72 of 187,500 blocks x 16 tokens = 2,160,000 tokens: four 500K sessions of five running."""
    status, evidence = _verdict(site, VLLM_FOUR)
    assert status == FIRED and "peak concurrency 4" in evidence[1]
    assert "vllm engine=0,model_name=glm-4.6-fp8" in evidence[2]


def test_a_scrape_without_engine_metrics_is_unknown(site: Site) -> None:
    status, evidence = _verdict(site, NO_ENGINE)
    assert status == UNKNOWN and "no sglang:num_running_reqs or vllm:num_requests_running" in evidence[0]


SESSION_CASES = [
    # (what, scrape lines, expected long sessions at the one sample time, or None: not judged)
    ("sglang: KV cache bounds the count", ["sglang:num_running_reqs 9", "sglang:num_used_tokens 1999999"], 3),
    (
        "sglang: running requests bound the count",
        ["sglang:num_running_reqs 2", "sglang:num_used_tokens 3e6"],
        2,
    ),
    (
        "sglang: ranks other than 0 are the same cache",
        [
            'sglang:num_running_reqs{tp_rank="0"} 4',
            'sglang:num_used_tokens{tp_rank="0"} 2e6',
            'sglang:num_running_reqs{tp_rank="1"} 4',
            'sglang:num_used_tokens{tp_rank="1"} 2e6',
        ],
        4,
    ),
    (
        "sglang: data-parallel ranks are separate caches",
        [
            'sglang:num_running_reqs{dp_rank="0"} 2',
            'sglang:num_used_tokens{dp_rank="0"} 1e6',
            'sglang:num_running_reqs{dp_rank="1"} 2',
            'sglang:num_used_tokens{dp_rank="1"} 1e6',
        ],
        4,
    ),
    ("sglang: running without KV tokens is not judged", ["sglang:num_running_reqs 4"], None),
    (
        "sglang: a negative reading is not judged",
        ["sglang:num_running_reqs 4", "sglang:num_used_tokens -1"],
        None,
    ),
    (
        "vllm: no cache info, no KV tokens",
        ['vllm:num_requests_running{engine="0"} 4', 'vllm:kv_cache_usage_perc{engine="0"} 0.9'],
        None,
    ),
    (
        "vllm: cache size not yet profiled",
        [
            'vllm:num_requests_running{engine="0"} 4',
            'vllm:kv_cache_usage_perc{engine="0"} 0.9',
            'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="None"} 1',
        ],
        None,
    ),
    (
        "vllm: each engine index has its own cache",
        [
            'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="62500"} 1',
            'vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="125000"} 1',
            'vllm:num_requests_running{engine="0",model_name="m"} 3',
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 1.0',
            'vllm:num_requests_running{engine="1",model_name="m"} 3',
            'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5',
        ],
        4,
    ),
]


@pytest.mark.parametrize(("what", "lines", "expected"), SESSION_CASES, ids=[c[0] for c in SESSION_CASES])
def test_long_sessions_at_one_sample_time(
    site: Site, what: str, lines: list[str], expected: int | None
) -> None:
    samples = parse_scrapes("\n".join(lines), 1000.0)
    verdict = next(v for v in evaluate(site, samples) if v.kind == "session-load")
    if expected is None:
        assert verdict.status == UNKNOWN, verdict.evidence
        assert "not counted" in verdict.evidence[-1]
    else:
        assert f"peak concurrency {expected}," in verdict.evidence[1], verdict.evidence


def _sglang_scrape(when: int, running: int, used: int) -> list[str]:
    return [f"# scrape_time {when}", f"sglang:num_running_reqs {running}", f"sglang:num_used_tokens {used}"]


def _hour_of(over: int, spikes: int = 4, calm: int = 2) -> list[Sample]:
    """13 scrapes five minutes apart (an hour, both ends): `spikes` sessions in the first
    `over`, `calm` in the rest."""
    lines: list[str] = []
    for index in range(13):
        count = spikes if index < over else calm
        lines += _sglang_scrape(1000 + 300 * index, count, count * 600_000)
    return parse_scrapes("\n".join(lines), 0.0)


def test_sustained_fraction_matters(site: Site) -> None:
    """Four sessions in 6 of 13 scrapes of the hour is under half of it; 7 of 13 is over."""
    quiet = next(v for v in evaluate(site, _hour_of(6)) if v.kind == "session-load")
    assert quiet.status == QUIET, quiet.evidence
    assert "13 sample time(s) in the 60-minute window; 6 with more than 3" in quiet.evidence[0]
    fired = next(v for v in evaluate(site, _hour_of(7)) if v.kind == "session-load")
    assert fired.status == FIRED and "(54% of the window" in fired.evidence[0], fired.evidence


def test_a_short_series_is_not_a_window(site: Site) -> None:
    """Four scrapes a minute apart hold 4 of the 61 minutes a 60-minute window holds at that
    spacing: a brief spike of four sessions cannot be judged either way (unknown, not quiet);
    a series too short to fire even if every missing minute were over is quiet."""
    lines: list[str] = []
    for index, count in enumerate((4, 2, 2, 2)):
        lines += _sglang_scrape(1000 + 60 * index, count, count * 600_000)
    samples = parse_scrapes("\n".join(lines), 0.0)
    verdict = next(v for v in evaluate(site, samples) if v.kind == "session-load")
    assert verdict.status == UNKNOWN
    assert "no reading at 57 of 61 sample times of the window; could tip the verdict" in verdict.evidence[1]


@pytest.mark.parametrize(("scrapes", "count", "status", "why"), [
    (40, 2, QUIET, "no reading at 21 of 61 sample times of the window; too few to fire even if all were "
                   "over"),
    (31, 4, FIRED, "no reading at 30 of 61 sample times of the window; the load read already fires"),
])
def test_a_short_series_is_judged_where_its_missing_times_cannot_tip_it(
    site: Site, scrapes: int, count: int, status: str, why: str
) -> None:
    """Scrapes a minute apart over part of the hour: 40 calm ones leave 21 unread minutes, too
    few to reach half of 61; 31 over the line are half of the window whatever the rest held."""
    lines: list[str] = []
    for index in range(scrapes):
        lines += _sglang_scrape(1000 + 60 * index, count, count * 600_000)
    samples = parse_scrapes("\n".join(lines), 0.0)
    verdict = next(v for v in evaluate(site, samples) if v.kind == "session-load")
    assert verdict.status == status and verdict.evidence[1] == why, verdict.evidence


def test_one_scrape_is_a_snapshot_not_a_sustained_load(site: Site) -> None:
    """Four long sessions in one scrape: 'snapshot, not sustained', unknown (exit 4), never fired."""
    samples = parse_scrapes("\n".join(_sglang_scrape(1000, 4, 2_400_000)), 0.0)
    verdict = next(v for v in evaluate(site, samples) if v.kind == "session-load")
    assert verdict.status == UNKNOWN
    assert verdict.evidence[0].startswith("snapshot, not sustained: 1 sample time in the 60-minute window "
                                          "(one with more than 3 sessions"), verdict.evidence
    assert "peak concurrency 4" in verdict.evidence[1]


def test_the_window_and_fraction_say_their_source(site: Site) -> None:
    """The shipped thresholds are placeholders, the site's to decide, and the verdict says so."""
    trigger = next(t for t in site.rules.triggers if isinstance(t, SessionLoadTrigger))
    assert {name: trigger.sources[name].kind for name in ("window_minutes", "sustained_fraction")} == {
        "window_minutes": "placeholder", "sustained_fraction": "placeholder"}
    verdict = next(v for v in evaluate(site, _hour_of(7)) if v.kind == "session-load")
    line = next(line for line in verdict.evidence
                if line.startswith("window_minutes 60: placeholder (site to decide"))
    assert "sustained_fraction 0.5: placeholder (site to decide" in line


def test_old_samples_outside_the_window_are_ignored(site: Site) -> None:
    old = "sglang:num_running_reqs 5 1000000\nsglang:num_used_tokens 3000000 1000000"
    new = "sglang:num_running_reqs 1 9000000\nsglang:num_used_tokens 600000 9000000"
    verdict = next(
        v for v in evaluate(site, parse_scrapes(old + "\n" + new, 0.0)) if v.kind == "session-load"
    )
    assert verdict.status == UNKNOWN and "snapshot, not sustained: 1 sample time" in verdict.evidence[0]
    assert "peak concurrency 1" in verdict.evidence[1]  # the old scrape's five are not counted


def test_many_instances_are_listed_briefly(site: Site) -> None:
    lines = [f'sglang:num_running_reqs{{dp_rank="{r}"}} 1' for r in range(50)]
    lines += [f'sglang:num_used_tokens{{dp_rank="{r}"}} 10' for r in range(50)]
    verdict = next(
        v for v in evaluate(site, parse_scrapes("\n".join(lines), 0.0)) if v.kind == "session-load"
    )
    assert "; and 46 more" in verdict.evidence[2] and len(verdict.evidence[2]) < 300


def test_sample_timestamps_in_milliseconds() -> None:
    samples = parse_scrapes('m{a="1"} 5 1700000000123\nm 6\n', 42.0)
    assert [(s.value, s.time, s.labels) for s in samples] == [
        (5.0, 1700000000.123, {"a": "1"}),
        (6.0, 42.0, {}),
    ]


def test_garbage_metrics_are_an_error() -> None:
    with pytest.raises(MetricsError, match=r"^metrics:1: not Prometheus text"):
        parse_scrapes("this is not prometheus\n", 0.0)


def test_no_metrics_is_unknown_not_fired(site: Site) -> None:
    verdict = next(v for v in evaluate(site, None) if v.kind == "session-load")
    assert verdict.status == UNKNOWN and not verdict.fired


def test_kernel_pin_quiet_on_the_shipped_contract(site: Site) -> None:
    verdict = next(
        v for v in evaluate(site, None, {"spark1": ("6.17.0-1032-nvidia", 4096)}) if v.kind == "kernel-pin"
    )
    assert verdict.status == QUIET
    assert any("spark1: running 6.17.0-1032-nvidia, page size 4096" in line for line in verdict.evidence)


def test_kernel_pin_fires_when_the_contract_moves(site: Site) -> None:
    contract = site.rules.contract.model_copy(update={"kernel_line": "7.0", "page_size": 65536})
    moved = replace(site, rules=site.rules.model_copy(update={"contract": contract}))
    verdict = next(v for v in evaluate(moved, None) if v.kind == "kernel-pin")
    assert verdict.fired and "kernel line 7.0, page size 65536" in verdict.evidence[0]
    half = site.rules.contract.model_copy(update={"kernel_line": "7.0"})
    only_kernel = replace(site, rules=site.rules.model_copy(update={"contract": half}))
    assert not next(v for v in evaluate(only_kernel, None) if v.kind == "kernel-pin").fired


@pytest.fixture
def metrics_server() -> Iterator[str]:
    body = FOUR.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def test_metrics_from_a_local_url(metrics_server: str) -> None:
    assert load_metrics(metrics_server) == FOUR.read_text()


def test_cli_exit_codes(capsys: pytest.CaptureFixture[str], metrics_server: str) -> None:
    """Fired 1, quiet 0, unusable metrics 2, and no metrics 4: never read as quiet."""
    assert main(["triggers", "--site", str(REPO), "--metrics", str(FOUR)]) == 1
    out = capsys.readouterr().out
    assert "FIRED   long-context-concurrency" in out and "re-opens: the KV-cache headroom decision" in out
    assert main(["triggers", "--site", str(REPO), "--metrics", str(TWO)]) == 0
    assert main(["triggers", "--site", str(REPO), "--metrics", metrics_server]) == 1
    assert main(["triggers", "--site", str(REPO), "--metrics", str(REPO / "no-such-file")]) == 2
    capsys.readouterr()
    assert main(["triggers", "--site", str(REPO)]) == 4
    assert "UNKNOWN long-context-concurrency" in capsys.readouterr().out
    assert main(["triggers", "--site", str(REPO), "--metrics", str(NO_ENGINE)]) == 4


def test_cli_reads_several_engines(capsys: pytest.CaptureFixture[str]) -> None:
    """A quiet SGLang scrape beside a scrape without engine metrics is judged, not unknown."""
    assert main(["triggers", "--site", str(REPO), "--metrics", str(TWO), "--metrics", str(NO_ENGINE)]) == 0
    assert main(["triggers", "--site", str(REPO), "--metrics", str(TWO), "--metrics", str(VLLM_FOUR)]) == 1
    capsys.readouterr()


# --- bounded metrics: every content is one located line, never a traceback or an echo ---

CASES = REPO / "tests" / "cases" / "metrics"
CASE_NAMES = sorted(path.stem for path in CASES.glob("*.yaml"))


def _case_bytes(case: dict[str, Any]) -> bytes:
    if "content" in case:
        return str(case["content"]).encode("utf-8")
    if "hex" in case:
        return bytes.fromhex(case["hex"])
    spec = case["generate"]
    text = str(spec["line"]) * int(spec.get("times", 1))
    text += str(spec.get("tail", "")) * int(spec.get("tail_times", 0))
    return text.encode()


def test_metrics_corpus_is_large_enough() -> None:
    assert len(CASE_NAMES) >= 20


@pytest.mark.parametrize("name", CASE_NAMES)
def test_metrics_case(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The exit status and located message a case asks for; stderr is one line, holds no hidden
    character and echoes none of the file's text lines."""
    case = YAML(typ="safe").load((CASES / f"{name}.yaml").read_text())
    data = _case_bytes(case)
    scrape = tmp_path / "scrape.prom"
    scrape.write_bytes(data)
    status = main(["triggers", "--site", str(REPO), "--metrics", str(scrape)])
    err = capsys.readouterr().err
    assert status == case["status"], err
    if case["status"] == 2:
        assert err.count("\n") == 1 and f"{scrape}{case['message']}" in err, err
        assert not any(is_hidden(char) for char in err.rstrip("\n"))
        for line in data.decode("utf-8", errors="replace").splitlines():
            if len(line.strip()) >= 6:
                assert line.strip() not in err


SPECIAL_FILES = [
    ("fifo", "a FIFO"),
    ("dev-zero", "a character device"),
    ("symlink-to-dev-zero", "a character device"),
    ("directory", "a directory"),
    ("missing", "cannot open: No such file or directory"),
]


@pytest.mark.parametrize(("kind", "said"), SPECIAL_FILES, ids=[kind for kind, _ in SPECIAL_FILES])
def test_metrics_file_that_is_not_a_regular_file(
    kind: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before a byte is read: a FIFO with no writer would hang, /dev/zero never ends."""
    path = tmp_path / "scrape.prom"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path = Path("/dev/zero")
    elif kind == "symlink-to-dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    started = time.monotonic()
    assert main(["triggers", "--site", str(REPO), "--metrics", str(path)]) == 2
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    assert f"{path}: " in err and said in err, err


def test_too_many_samples_is_an_error() -> None:
    with pytest.raises(MetricsError, match=r"^m:200001: more than 200000 samples"):
        parse_scrapes("m 1\n" * (MAX_SAMPLES + 1), 0.0, "m")


def test_only_wanted_metrics_are_kept() -> None:
    samples = parse_scrapes("a 1\nb 2\na 3\n", 0.0, metrics={"a"})
    assert [s.value for s in samples] == [1.0, 3.0]


@pytest.fixture
def slow_server() -> Iterator[tuple[str, threading.Event]]:
    """/trickle sends one byte every 0.2 s for ever, /huge answers 17 MiB, /secret answers
    500 with a body: a hostile or broken metrics endpoint on 127.0.0.1."""
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/huge":
                self.send_response(200)
                self.end_headers()
                chunk = b"# padding\n" * 10_000
                try:
                    for _ in range(17 * 1024 * 1024 // len(chunk) + 1):
                        self.wfile.write(chunk)
                except OSError:
                    pass
                return
            if self.path == "/secret":
                self.send_response(500)
                self.end_headers()
                self.wfile.write(b"root:$6$hash\n")
                return
            self.send_response(200)
            self.end_headers()
            while not stop.is_set():
                try:
                    self.wfile.write(b"#")
                    self.wfile.flush()
                except OSError:
                    return
                stop.wait(0.2)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", stop
    stop.set()
    server.shutdown()
    server.server_close()


def test_a_trickling_url_is_cut_off_at_the_deadline(
    slow_server: tuple[str, threading.Event],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each byte arrives well within any per-read timeout; only an overall deadline stops it."""
    base, _stop = slow_server
    monkeypatch.setattr(metrics_module, "DEADLINE_SECONDS", 1.5)
    started = time.monotonic()
    assert main(["triggers", "--site", str(REPO), "--metrics", f"{base}/trickle"]) == 2
    # the deadline's own message says it fired; no upper bound on wall time (shared machines)
    assert time.monotonic() - started > 1.4
    assert "/trickle: no complete answer within 1.5 s" in capsys.readouterr().err


def test_a_huge_answer_is_refused(slow_server: tuple[str, threading.Event]) -> None:
    base, _stop = slow_server
    with pytest.raises(MetricsError, match="answer larger than 16 MiB"):
        load_metrics(f"{base}/huge", deadline_seconds=30)


def test_an_http_error_names_the_status_not_the_body(
    slow_server: tuple[str, threading.Event], capsys: pytest.CaptureFixture[str]
) -> None:
    base, _stop = slow_server
    assert main(["triggers", "--site", str(REPO), "--metrics", f"{base}/secret"]) == 2
    err = capsys.readouterr().err
    assert "/secret: HTTP status 500" in err and "$6$" not in err


def test_url_credentials_are_masked() -> None:
    assert shown_source("http://me:pw@127.0.0.1:9090/m") == "http://***@127.0.0.1:9090/m"
    assert shown_source("http://127.0.0.1:9090/m") == "http://127.0.0.1:9090/m"


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_lab_stand_in_is_read_idle_and_with_sessions(site: Site, engine: str) -> None:
    """What the lab's serving stand-in exports is what the trigger reads: idle holds no long
    session (vLLM exports its cache info, so an idle vLLM is counted, not blind), fault
    lane-sessions holds four; one scrape of either is a snapshot, not a sustained load."""
    from sparkbase_lab.shims.cmd_serving import metrics_text

    idle = next(
        v for v in evaluate(site, parse_scrapes(metrics_text(engine), 0.0)) if v.kind == "session-load"
    )
    assert idle.status == UNKNOWN and "(none with more than 3" in idle.evidence[0], idle.evidence
    assert "peak concurrency 0" in idle.evidence[1]
    busy = parse_scrapes(metrics_text(engine, sessions=True), 0.0)
    snapshot = next(v for v in evaluate(site, busy) if v.kind == "session-load")
    assert snapshot.status == UNKNOWN and "(one with more than 3" in snapshot.evidence[0]
    assert "peak concurrency 4" in snapshot.evidence[1]


def test_cli_fires_trigger_1_when_the_site_moves_its_driver_pin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The site confirms another driver in its baseline (kernel line and page size unchanged):
    `triggers` fires trigger 1 (the notes' "kernel/driver pin move") and exits 1."""
    import shutil

    for part in ("baselines", "inventory", "lanes"):
        shutil.copytree(REPO / part, tmp_path / part)
    stock = tmp_path / "baselines" / "site-stock-6.17-4k.yaml"
    text = stock.read_text()
    assert "  version: 580.126.09\n" in text
    stock.write_text(text.replace("580.126.09\n", "580.142.01\n").replace(
        "580.126.09-0ubuntu0.24.04.1\n", "580.142.01-0ubuntu0.24.04.1\n"))
    assert main(["triggers", "--site", str(tmp_path), "--metrics", str(TWO)]) == 1
    out = capsys.readouterr().out
    assert "FIRED   kernel-pin-7x-64k (kernel-pin)" in out
    assert ("site driver pin: 580.142.01 (spark1, spark2, spark3, spark4) "
            "(trigger: a move from 580.126.09; moved)") in out
    assert main(["triggers", "--site", str(REPO), "--metrics", str(TWO)]) == 0  # the shipped pin: quiet
    assert "QUIET   kernel-pin-7x-64k" in capsys.readouterr().out


def test_vllm_cache_size_is_each_nodes_own(site: Site) -> None:
    """Two nodes' vLLM engines, both engine index 0, with caches of different sizes (as
    Prometheus labels each target's series with its instance): each node's usage is read
    against its own cache, not the last one read."""
    lines: list[str] = []
    for node, blocks in (("spark1", 250_000), ("spark2", 50_000)):
        where = f'engine="0",instance="{node}:8000"'
        lines += [f'vllm:cache_config_info{{block_size="16",{where},num_gpu_blocks="{blocks}"}} 1',
                  f"vllm:num_requests_running{{{where}}} 4",
                  f"vllm:kv_cache_usage_perc{{{where}}} 0.6"]
    samples = parse_scrapes("\n".join(lines), 0.0)
    verdict = next(v for v in evaluate(site, samples) if v.kind == "session-load")
    # spark1: 0.6 x 4,000,000 = 2,400,000 tokens (4 sessions); spark2: 0.6 x 800,000 (none)
    assert "peak concurrency 4," in verdict.evidence[1], verdict.evidence


def test_url_credentials_are_sent_as_basic_authentication_not_as_the_host() -> None:
    """A Prometheus or exporter behind basic auth: `http://USER:PASSWORD@HOST/…` (each part
    percent-encoded as in any URL) reaches HOST with an Authorization header."""
    import base64

    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            ok = seen[-1] == "Basic " + base64.b64encode(b"me:p@ss:word").decode()
            self.send_response(200 if ok else 401)
            self.end_headers()
            self.wfile.write(FOUR.read_bytes() if ok else b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        assert load_metrics(f"http://me:p%40ss%3Aword@127.0.0.1:{port}/metrics") == FOUR.read_text()
        with pytest.raises(MetricsError, match=r"^http://\*\*\*@127\.0\.0\.1:\d+/metrics: HTTP status 401$"):
            load_metrics(f"http://me:wrong@127.0.0.1:{port}/metrics")
        assert seen == ["Basic " + base64.b64encode(b"me:p@ss:word").decode(),
                        "Basic " + base64.b64encode(b"me:wrong").decode()]
    finally:
        server.shutdown()
        server.server_close()
