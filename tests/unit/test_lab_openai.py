"""The lane stand-in's OpenAI-compatible API (lab/shims/openai_api.py), served on 127.0.0.1 as
the stand-in serves it and read by the product's own client: the forms of the real engines'
answers (key for key against the real vLLM samples), deterministic completions per (prompt,
build), and the build and traffic faults."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sparkbase.qualify import client
from sparkbase.qualify.client import ApiEndpoint, ApiError, Request
from sparkbase_lab.shims import cmd_serving, openai_api

REAL = Path(__file__).parents[1] / "fixtures" / "real"
MODEL = "deepseek-ai/DeepSeek-V4.1-Flash-1017"
ARGV = {"sglang": ["-m", "sglang.launch_server", "--model-path", MODEL, "--tp", "4"],
        "vllm": ["vllm", "serve", MODEL, "--tensor-parallel-size", "4"]}


@pytest.fixture
def active(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The node's faults as the stand-in reads them (none to start with); build `lane-x.service`."""
    faults: dict[str, Any] = {}
    monkeypatch.setattr(openai_api, "faults", lambda: faults)
    monkeypatch.setenv("SPARKBASE_LAB_BUILD", "lane-x.service")
    monkeypatch.setattr(openai_api, "TOKEN_SECONDS", 0.0005)
    monkeypatch.setattr(openai_api, "_noise_factor", None)
    return faults


def serve(engine: str) -> Iterator[ApiEndpoint]:
    class Handler(BaseHTTPRequestHandler):  # what cmd_serving.serve answers and routes
        def do_GET(self) -> None:
            body = cmd_serving.models_json(ARGV[engine], engine).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            openai_api.post(self, engine, ARGV[engine])

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield ApiEndpoint("spark1", "127.0.0.1", server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.fixture(params=["sglang", "vllm"])
def engine(request: pytest.FixtureRequest, active: dict[str, Any]) -> Iterator[tuple[str, ApiEndpoint]]:
    for endpoint in serve(request.param):
        yield request.param, endpoint


def ask(endpoint: ApiEndpoint, prompt: str, tokens: int = 12) -> client.Measured:
    return client.complete(endpoint, Request(MODEL, prompt, tokens, 7), 30.0)


def test_the_product_client_reads_both_engines(engine: tuple[str, ApiEndpoint]) -> None:
    _name, endpoint = engine
    assert client.served_model(endpoint) == MODEL
    measured = ask(endpoint, "The capital of France is")
    assert measured.token_ids is not None and len(measured.token_ids) == measured.tokens == 12
    assert measured.text == "".join(openai_api.text_of(t) for t in measured.token_ids)
    assert measured.finish_reason == "length" and measured.decode_tokens_per_second is not None
    text, ids = client.complete_once(endpoint, Request(MODEL, "The capital of France is", 12, 7), 30.0)
    assert (text, ids) == (measured.text, measured.token_ids)  # streamed or not, one answer


def test_completions_are_deterministic_per_prompt_and_build(engine: tuple[str, ApiEndpoint],
                                                            active: dict[str, Any]) -> None:
    _name, endpoint = engine
    changed = next(p for p in (f"prompt {n}" for n in range(100)) if openai_api.changed_at(p) is not None)
    same = next(p for p in (f"prompt {n}" for n in range(100)) if openai_api.changed_at(p) is None)
    before = {p: ask(endpoint, p).completion(p) for p in (changed, same)}
    assert {p: ask(endpoint, p).completion(p) for p in (changed, same)} == before
    active["build-changes-output"] = ["another.service"]  # another build's fault changes nothing here
    assert ask(endpoint, changed).completion(changed) == before[changed]
    active["build-changes-output"] = ["lane-x.service"]
    after, earlier = ask(endpoint, changed).token_ids, before[changed].token_ids
    flip = openai_api.changed_at(changed)
    assert after is not None and earlier is not None and flip is not None
    assert after[:flip] == earlier[:flip] and after[flip] != earlier[flip]
    assert ask(endpoint, same).completion(same) == before[same]


def test_vllm_refuses_another_model_name_as_vllm_does(active: dict[str, Any]) -> None:
    for endpoint in serve("vllm"):
        with pytest.raises(ApiError, match=r"HTTP status 404: The model `other` does not exist\."):
            client.complete(endpoint, Request("other", "x", 4, 7), 30.0)


def test_the_non_streamed_vllm_answer_has_the_real_answers_keys(active: dict[str, Any]) -> None:
    """Key for key the real vLLM 0.27.1 answer of the corpus (its choice too)."""
    pasted = REAL / "v1_completions__vllm-0.27.1_tp2_temperature0_no_trailing_newline__ucm-notes.txt"
    real_text = pasted.read_text()
    real = json.loads(real_text[real_text.index("{"): real_text.rindex("}") + 1])
    lab = openai_api.whole_answer("vllm", MODEL, [101, 102], None, False)
    assert list(lab) == list(real)
    assert list(lab["choices"][0]) == list(real["choices"][0])
    assert set(lab["usage"]) == set(real["usage"])


def test_the_sglang_stream_chunk_has_sglangs_fields() -> None:
    """SGLang's CompletionResponseStreamChoice (protocol.py, 004c82e): token ids only when asked."""
    assert list(openai_api.stream_choice("sglang", " a", None, None, None)) == [
        "index", "text", "logprobs", "finish_reason", "matched_stop"]
    assert list(openai_api.stream_choice("sglang", " a", None, [5], [1, 2])) == [
        "index", "text", "logprobs", "finish_reason", "matched_stop", "token_ids", "prompt_token_ids"]
    assert list(openai_api.stream_choice("vllm", " a", None, None, None)) == [
        "index", "text", "logprobs", "finish_reason", "stop_reason", "prompt_token_ids", "token_ids"]


def test_the_traffic_and_speed_faults(active: dict[str, Any]) -> None:
    assert openai_api.running() == 0.0
    active["other-traffic"] = True
    assert openai_api.running() == 2.0  # somebody else's two requests on the lane
    assert openai_api.speed_factor(active) == 1.0
    active["build-slower"] = ["*"]
    assert openai_api.speed_factor(active) == 1.5
    active["build-slower"] = ["another.service"]
    active["build-noisy"] = ["lane-x.service"]
    factors = {round(openai_api.speed_factor(active), 6) for _ in range(20)}
    assert len(factors) > 1 and all(0.6 * 0.75 <= f <= 1.4 * 1.25 for f in factors)
