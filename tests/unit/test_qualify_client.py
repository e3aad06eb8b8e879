"""The lane API client: the stream parser (token ids, usage, reads cut mid-line, engine
errors, bounds) and the bounded HTTP exchange against a small server on 127.0.0.1 (a
stream, an error answer, a trickle cut at the deadline). Real answers: test_facts_real_corpus.py."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbase.gate.records import Completion
from sparkbase.model.lanes import Lane, LaneEndpoint
from sparkbase.qualify import client
from sparkbase.qualify.client import ApiEndpoint, ApiError, Request, StreamParser
from sparkbase.qualify.endpoint import api_endpoint, lane_api_address
from sparkbase.transport.client import Endpoint
from sparkbase.transport.targets import LAB_METRICS_PORT_OFFSET, SshTarget


def event(text: str, ids: list[int] | None = None, finish: str | None = None) -> bytes:
    """One SGLang-shaped completion chunk (serving_completions.py: `matched_stop`, `token_ids`
    only when asked) as the line SSE sends."""
    choice: dict[str, object] = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                                 "matched_stop": None}
    if ids is not None:
        choice["token_ids"] = ids
    chunk = {"id": "0f6c", "object": "text_completion", "created": 1, "model": "m", "choices": [choice],
             "usage": None}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


USAGE = b'data: {"id":"0f6c","object":"text_completion","created":1,"model":"m","choices":[],' \
        b'"usage":{"prompt_tokens":5,"total_tokens":12,"completion_tokens":7}}\n\n'
DONE = b"data: [DONE]\n\n"


def test_token_ids_count_exactly_and_decode_excludes_the_first_chunk() -> None:
    parser = StreamParser()
    parser.feed(event(" Paris", [12366, 13]), 1.0)  # a first chunk of two tokens
    parser.feed(event(" is", [374]), 1.5)
    parser.feed(event(" nice", [6555], finish="length") + USAGE + DONE, 2.0)
    measured = parser.measured(0.25)
    assert measured.text == " Paris is nice"
    assert measured.token_ids == (12366, 13, 374, 6555)
    assert measured.tokens == 4  # the ids, not the usage's 7
    assert measured.ttft_seconds == pytest.approx(0.75)
    assert measured.decode_tokens_per_second == pytest.approx(2 / 1.0)  # 2 tokens after the first chunk's 2
    assert measured.finish_reason == "length"
    hashed = Completion("p01", "other text", (12366, 13, 374, 6555))
    assert measured.completion("p01").digest() == hashed.digest()  # the ids are hashed


def test_without_token_ids_the_usage_counts_and_the_text_is_hashed() -> None:
    parser = StreamParser()
    for at, word in enumerate([" a", " b", " c"]):
        parser.feed(event(word), float(at))
    parser.feed(USAGE + DONE, 3.0)
    measured = parser.measured(-1.0)
    assert (measured.token_ids, measured.tokens) == (None, 7)
    assert measured.decode_tokens_per_second == pytest.approx(6 / 2.0)
    assert measured.completion("p").canonical() == '{"text":" a b c"}'


def test_ids_on_some_chunks_only_are_no_ids() -> None:
    """A build that returns ids for part of the stream does not give the whole completion's ids."""
    parser = StreamParser()
    parser.feed(event("a", [1]) + event("b") + DONE, 1.0)
    assert parser.measured(0.0).token_ids is None


def test_a_read_cut_mid_line_is_joined() -> None:
    whole = event("x", [7]) + event("y", [8]) + DONE
    parser = StreamParser()
    for index in range(0, len(whole), 5):
        parser.feed(whole[index:index + 5], index / 100)
    assert parser.done and parser.measured(0.0).token_ids == (7, 8)


def test_other_sse_lines_are_skipped_and_nothing_after_done_counts() -> None:
    parser = StreamParser()
    parser.feed(b": keep-alive\n\nevent: message\nid: 3\n" + event("z", [9]) + DONE + event("late", [1]), 1.0)
    assert parser.measured(0.0).token_ids == (9,)


@pytest.mark.parametrize(("data", "said"), [
    (b'data: {"error": {"message": "out of memory", "code": 500}}\n\n',
     "the engine answered an error: out of memory"),
    (b'data: {"object": "error", "message": "bad seed", "code": 400}\n\n', "answered an error: bad seed"),
    (b"data: {not json\n\n", "event line 1 is not JSON"),
    (b'data: [1, 2]\n\n', "is not a JSON object"),
    (b'data: {"choices": [{"text": "a", "token_ids": ["x"]}]}\n\n', "not a list of token ids"),
])
def test_a_broken_or_failing_stream_is_an_api_error(data: bytes, said: str) -> None:
    with pytest.raises(ApiError, match=said):
        StreamParser("http://e/v1/completions").feed(data, 0.0)


def test_a_stream_without_generated_text_is_refused() -> None:
    parser = StreamParser("e")
    parser.feed(USAGE + DONE, 1.0)
    with pytest.raises(ApiError, match="ended without any generated text"):
        parser.measured(0.0)


def test_the_answer_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "MAX_BYTES", 100)
    with pytest.raises(ApiError, match="answer larger than"):
        StreamParser().feed(b"x" * 101, 0.0)
    monkeypatch.setattr(client, "MAX_LINE", 10)
    with pytest.raises(ApiError, match="a line of more than 10 bytes"):
        StreamParser().feed(b"data: " + b"x" * 20, 0.0)


def test_the_request_asks_for_token_ids_usage_and_the_whole_length() -> None:
    body = Request("m", "p", max_tokens=256, seed=7).body(stream=True)
    assert body["return_token_ids"] is True and body["ignore_eos"] is True
    assert body["stream_options"] == {"include_usage": True} and body["temperature"] == 0.0
    assert "stream_options" not in Request("m", "p", 8, 7).body(stream=False)  # vLLM refuses it unstreamed


@pytest.fixture
def engine() -> Iterator[tuple[ApiEndpoint, threading.Event]]:
    """/v1/models and a streamed /v1/completions as an engine answers them; a prompt "trickle"
    is answered one byte every 0.2 s, "missing" with vLLM's 404 error body."""
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body = b'{"object":"list","data":[{"id":"served/model","object":"model"}]}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if request["prompt"] == "missing":
                body = (b'{"object":"error","message":"The model `x` does not exist.",'
                        b'"type":"NotFoundError","param":null,"code":404}')
                self.send_response(404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if request["prompt"] == "trickle":
                while not stop.is_set():
                    self._chunk(b":")
                    stop.wait(0.2)
                return
            for number in range(4):
                self._chunk(event(f" w{number}", [100 + number]))
                time.sleep(0.02)
            self._chunk(USAGE + DONE)
            self.wfile.write(b"0\r\n\r\n")

        def _chunk(self, data: bytes) -> None:
            try:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            except OSError:
                stop.set()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield ApiEndpoint("spark1", "127.0.0.1", server.server_address[1]), stop
    stop.set()
    server.shutdown()
    server.server_close()


def test_a_streamed_completion_is_measured_over_http(engine: tuple[ApiEndpoint, threading.Event]) -> None:
    endpoint, _stop = engine
    assert client.served_model(endpoint) == "served/model"
    measured = client.complete(endpoint, Request("served/model", "go", 4, 1))
    assert measured.token_ids == (100, 101, 102, 103) and measured.text == " w0 w1 w2 w3"
    assert measured.ttft_seconds > 0 and measured.decode_tokens_per_second is not None


def test_an_engine_error_answer_is_named(engine: tuple[ApiEndpoint, threading.Event]) -> None:
    endpoint, _stop = engine
    with pytest.raises(ApiError, match=r"/v1/completions: HTTP status 404: The model `x` does not exist"):
        client.complete(endpoint, Request("x", "missing", 4, 1))


def test_a_trickling_answer_is_cut_off_at_the_deadline(engine: tuple[ApiEndpoint, threading.Event]) -> None:
    """Each byte arrives well within any single read's wait; only the whole deadline stops it."""
    endpoint, _stop = engine
    started = time.monotonic()
    with pytest.raises(ApiError, match="no complete answer within the deadline"):
        client.complete(endpoint, Request("m", "trickle", 4, 1), deadline_seconds=1.0)
    assert time.monotonic() - started >= 1.0


def test_a_closed_port_says_so() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ApiError, match="connection refused"):
        client.served_model(ApiEndpoint("spark1", "127.0.0.1", port))


def _lane(metrics: dict[str, object] | None) -> Lane:
    runtime: dict[str, object] = {"unit": "lane-x.service", "match": ["sglang.launch_server"]}
    if metrics is not None:
        runtime["metrics"] = metrics
    return Lane.model_validate({"model": "m", "engine": "sglang", "baseline": "b",
                                "baseline_version": "1.0.0", "shape": "ring4",
                                "nodes": ["spark1", "spark2", "spark3", "spark4"], "runtime": runtime})


def test_the_api_is_the_metrics_port_on_the_first_metrics_node() -> None:
    assert lane_api_address(_lane({"port": 30000})) == ("spark1", 30000)
    assert lane_api_address(_lane({"port": 8000, "nodes": ["spark2"]})) == ("spark2", 8000)
    assert lane_api_address(_lane(None)) is None


def test_the_lanes_endpoint_wins() -> None:
    lane = _lane({"port": 30000})
    assert lane.runtime is not None
    runtime = lane.runtime.model_copy(update={"endpoint": LaneEndpoint(node="spark3", port=8000)})
    assert lane_api_address(lane.model_copy(update={"runtime": runtime})) == ("spark3", 8000)


def test_the_endpoint_is_the_node_address_or_the_labs_loopback_port(tmp_path: Path) -> None:
    lane = _lane({"port": 30000})
    target = SshTarget("spark1", "spark1", tmp_path / "ssh_config", tmp_path / "known_hosts", "root",
                       False, 5.0)
    real = api_endpoint("x", lane, {"spark1": target}, lab=False,
                        resolve=lambda _t: Endpoint("10.69.43.170", 22, "root", ()))
    assert real.url("/v1/models") == "http://10.69.43.170:30000/v1/models"
    lab = api_endpoint("x", lane, {"spark1": target}, lab=True,
                       resolve=lambda _t: Endpoint("127.0.0.1", 2201, "root", ()))
    assert (lab.host, lab.port) == ("127.0.0.1", 2201 + LAB_METRICS_PORT_OFFSET)
    with pytest.raises(ApiError, match="not loopback; not asked"):
        api_endpoint("x", lane, {"spark1": target}, lab=True,
                     resolve=lambda _t: Endpoint("10.0.0.1", 22, "root", ()))
    with pytest.raises(ApiError, match="names no API endpoint"):
        api_endpoint("x", _lane(None), {"spark1": target}, lab=False)
