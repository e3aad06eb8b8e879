"""The site's Prometheus asked for a window (`sparkbase.gate.prometheus`): the window's steps,
the API's answer read strictly, and every way of failing is one clear line. The parser's real
answers are in tests/fixtures/real/ (test_facts_real_corpus.py); a real server is asked in
tests/e2e/test_triggers_prometheus.py. Here the server is a stand-in on 127.0.0.1."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbase.cli.main import main
from sparkbase.gate.prometheus import (
    MAX_STEPS,
    PrometheusError,
    api_url,
    parse_answer,
    query_range,
    window_ending,
)

REPO = Path(__file__).parents[2]
REAL = REPO / "tests" / "fixtures" / "real"
BAD_DATA = (REAL / "prometheus_api_v1_query_range__400_bad_data_parse_error__prometheus-2.42-debian12.json"
            ).read_bytes()


def test_an_hour_is_read_every_15_seconds_and_a_week_in_at_most_2000_steps() -> None:
    hour = window_ending(1_000_000.7, 60)
    assert (hour.start, hour.end, hour.step, hour.steps) == (996_400, 1_000_000, 15, 241)
    week = window_ending(1_000_000, 7 * 24 * 60)
    assert week.step == 303 and week.steps <= MAX_STEPS + 1


@pytest.mark.parametrize(("url", "said"), [
    ("ftp://127.0.0.1:9090", "not an http(s) URL of a Prometheus server"),
    ("127.0.0.1:9090", "not an http(s) URL of a Prometheus server"),
    ("http://", "not an http(s) URL of a Prometheus server"),
    ("http://127.0.0.1:9090/?x=1", "without a query or fragment"),
    ("http://me:secret@127.0.0.1:9090/?x=1", "http://***@127.0.0.1:9090/?x=1: give the server's URL"),
])
def test_a_url_that_is_not_a_server_is_refused_before_asking(url: str, said: str) -> None:
    with pytest.raises(PrometheusError) as raised:
        api_url(url, "query_range", {"query": "up"})
    assert said in str(raised.value) and "secret" not in str(raised.value)


def test_the_query_keeps_a_path_prefix_and_is_url_encoded() -> None:
    url = api_url("http://127.0.0.1:9090/prom/", "query_range",
                  {"query": "sglang:num_running_reqs", "step": "15"})
    assert url == "http://127.0.0.1:9090/prom/api/v1/query_range?query=sglang%3Anum_running_reqs&step=15"


def _answer(result: object, kind: str = "matrix", **extra: object) -> str:
    return json.dumps({"status": "success", "data": {"resultType": kind, "result": result}, **extra})


SERIES = {"metric": {"__name__": "m", "a": "1"},
          "values": [[1000, "NaN"], [1015.5, "+Inf"], [1030, "-2.5e3"]]}


def test_values_are_prometheus_numbers_and_warnings_are_kept() -> None:
    samples, warnings = parse_answer(_answer([SERIES], warnings=["partial\nanswer"]))
    assert [(s.metric, s.labels, s.time) for s in samples] == [
        ("m", {"a": "1"}, t) for t in (1000, 1015.5, 1030)]
    assert str(samples[0].value) == "nan" and samples[1].value == float("inf") and samples[2].value == -2500.0
    assert warnings == ["partial\\nanswer"]  # escaped: one line


@pytest.mark.parametrize(("text", "said"), [
    ("<html>", "not a Prometheus API answer (not JSON)"),
    ("[]", "no status success or error"),
    ('{"status": "success"}', "no data.result list"),
    (_answer([SERIES], kind="scalar"), "a scalar result, not series"),
    (_answer([{"metric": {"__name__": "m"}, "values": [[1000, "1_000"]]}]), "series 1: a point value that"),
    (_answer([{"metric": {"__name__": "m"}, "values": [[1000, "0x10"]]}]), "a point value that is not"),
    (_answer([{"metric": {"__name__": "m"}, "values": [[1000, 5]]}]), "a point value that is not"),
    (_answer([{"metric": {"__name__": "m"}, "values": [[True, "5"]]}]), "a point time that is not Unix"),
    (_answer([{"metric": {"__name__": "m"}, "values": [["1000", "5"]]}]), "a point time that is not"),
    (_answer([{"metric": {"__name__": "m"}, "values": [[1e300, "5"]]}]), "a point time that is not"),
    (_answer([{"metric": {"__name__": "m"}, "values": [[1000]]}]), "a point that is not [time"),
    (_answer([{"metric": {"a": 1}, "values": []}]), "a label that is not a string"),
    (_answer([{"values": []}]), "no metric labels"),
    (_answer([{"metric": {}, "value": None}], kind="vector"), "a point that is not"),
    (_answer([SERIES], warnings=[1]), "warnings are not strings"),
    ("[" * 100_000, "not JSON"),
    ('{"status": "error", "errorType": "execution", "error": "query timed out\\u001b[2J"}',
     "Prometheus error: execution: query timed out\\x1b[2J"),
])
def test_an_unusable_answer_is_one_clear_error(text: str, said: str) -> None:
    with pytest.raises(PrometheusError) as raised:
        parse_answer(text, "src")
    assert str(raised.value).startswith("src: ") and said in str(raised.value), str(raised.value)


@pytest.fixture
def stand_in() -> Iterator[tuple[str, list[tuple[int, bytes]]]]:
    """A server answering each GET with the next (status, body) of the list; the list is
    filled by the test."""
    answers: list[tuple[int, bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = answers.pop(0) if answers else (500, b"")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", answers
    server.shutdown()
    server.server_close()


def test_a_prometheus_error_answer_names_its_type_and_message(
    stand_in: tuple[str, list[tuple[int, bytes]]]
) -> None:
    url, answers = stand_in
    answers.append((400, BAD_DATA))  # what Prometheus 2.42 answers a query that does not parse
    with pytest.raises(PrometheusError) as raised:
        query_range(url, ["sglang:num_running_reqs"], window_ending(1_000_000, 60))
    assert str(raised.value) == (f"{url} (sglang:num_running_reqs): HTTP status 400: bad_data: 1:25: "
                                 "parse error: missing unit character in duration")


def test_an_error_status_without_the_api_envelope_names_the_status(
    stand_in: tuple[str, list[tuple[int, bytes]]]
) -> None:
    url, answers = stand_in
    answers.append((503, b"<html>upstream down</html>"))
    with pytest.raises(PrometheusError, match=r"\(sglang:num_running_reqs\): HTTP status 503$"):
        query_range(url, ["sglang:num_running_reqs"], window_ending(1_000_000, 60))


def test_every_metric_is_asked_for_over_the_window(stand_in: tuple[str, list[tuple[int, bytes]]]) -> None:
    url, answers = stand_in
    for name in ("a", "b"):
        answers.append((200, _answer([{"metric": {"__name__": name}, "values": [[996_400, "1"]]}]).encode()))
    window = window_ending(1_000_000, 60)
    got = query_range(url, ["b", "a"], window)
    assert [s.metric for s in got.samples] == ["a", "b"] and window.steps == 241


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_cli_says_why_prometheus_cannot_be_asked(capsys: pytest.CaptureFixture[str]) -> None:
    """Unreachable or not a URL: exit 2, one line on stderr, no traceback."""
    for url, said in ((f"http://127.0.0.1:{_closed_port()}", "cannot fetch: [Errno 111] Connection refused"),
                      ("ftp://127.0.0.1:9090", "not an http(s) URL")):
        assert main(["triggers", "--site", str(REPO), "--prometheus", url]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.startswith("sparkbase: prometheus: ")
        assert said in captured.err and captured.err.count("\n") == 1, captured.err


def test_prometheus_and_metrics_are_one_or_the_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["triggers", "--site", str(REPO), "--prometheus", "http://127.0.0.1:9", "--metrics", "x.prom"])
    assert raised.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
