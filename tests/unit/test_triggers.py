"""Re-open triggers: session load from saved scrapes and a local server, kernel pin from the contract."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sparkbase.cli.main import main
from sparkbase.gate.triggers import FIRED, QUIET, UNKNOWN, evaluate, load_metrics, parse_scrapes
from sparkbase.model.site import Site, load_site

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


def test_four_concurrent_500k_sessions_fire(site: Site) -> None:
    status, evidence = _verdict(site, FOUR)
    assert status == FIRED
    assert "13 sample time(s)" in evidence[0] and "peak concurrency 4" in evidence[1]


def test_two_concurrent_500k_sessions_do_not(site: Site) -> None:
    status, evidence = _verdict(site, TWO)
    assert status == QUIET
    assert "peak concurrency 2" in evidence[1]


def test_sustained_fraction_matters(site: Site) -> None:
    """Four sessions in only one of four scrapes is a spike, not normal traffic."""
    lines = []
    for index, count in enumerate((4, 2, 2, 2)):
        lines.append(f"# scrape_time {1000 + 60 * index}")
        lines += [f'sparkrun_request_context_tokens{{request="r{s}"}} 600000' for s in range(count)]
    samples = parse_scrapes("\n".join(lines), 0.0)
    verdict = next(v for v in evaluate(site, samples) if v.kind == "session-load")
    assert verdict.status == QUIET


def test_old_samples_outside_the_window_are_ignored(site: Site) -> None:
    old = "\n".join(f'sparkrun_request_context_tokens{{request="r{s}"}} 600000 1000000' for s in range(5))
    new = "\n".join(f'sparkrun_request_context_tokens{{request="r{s}"}} 600000 9000000' for s in range(1))
    verdict = next(
        v for v in evaluate(site, parse_scrapes(old + "\n" + new, 0.0)) if v.kind == "session-load"
    )
    assert verdict.status == QUIET and "1 sample time(s)" in verdict.evidence[0]


def test_sample_timestamps_in_milliseconds() -> None:
    samples = parse_scrapes('m{a="1"} 5 1700000000123\nm 6\n', 42.0)
    assert [(s.value, s.time, s.labels) for s in samples] == [
        (5.0, 1700000000.123, {"a": "1"}),
        (6.0, 42.0, {}),
    ]


def test_garbage_metrics_are_an_error() -> None:
    with pytest.raises(ValueError):
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
    assert main(["triggers", "--site", str(REPO), "--metrics", str(FOUR)]) == 1
    out = capsys.readouterr().out
    assert "FIRED   long-context-concurrency" in out and "re-opens: the KV-cache headroom decision" in out
    assert main(["triggers", "--site", str(REPO), "--metrics", str(TWO)]) == 0
    assert main(["triggers", "--site", str(REPO), "--metrics", metrics_server]) == 1
    assert main(["triggers", "--site", str(REPO), "--metrics", str(REPO / "no-such-file")]) == 2
