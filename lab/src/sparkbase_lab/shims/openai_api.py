"""A lane stand-in's OpenAI-compatible API, as SGLang and vLLM answer it (runs inside the node).

`cmd_serving.serve` answers `GET /v1/models` itself (`models_json`) and routes POSTs here:
`/v1/completions`, not streamed or streamed (server-sent events, one `data: {chunk}` line and a
blank line per event, `data: [DONE]` last). The bodies follow each engine's own code, field
for field:

- SGLang (`python/sglang/srt/entrypoints/openai/protocol.py` and `serving_completions.py`,
  004c82e): a 32-hex id; choices with `matched_stop`; `token_ids` (and `prompt_token_ids` on
  the first chunk) only when `"return_token_ids": true`; `usage: null` on every chunk, then a
  chunk with no choices and the usage when `stream_options.include_usage`; a non-streamed
  answer with `metadata.weight_version`.
- vLLM (`vllm/entrypoints/openai/completion/protocol.py`, 002032e; the real answers in
  tests/fixtures/real/ for the non-streamed forms): a `cmpl-` id of 16 hex; choices with
  `stop_reason`, `token_ids` and `prompt_token_ids` (null unless asked); the non-streamed
  answer's vLLM-only keys; a completion for another model than the served one refused (404).

What it generates is deterministic per (prompt, engine build): a prompt's tokens come from a
hash of the prompt, and the same build answers the same prompt the same way every time. A
build is the process's `SPARKBASE_LAB_BUILD` (its unit, unless the unit's environment names
another). Faults (the node's faults.json, read at every request; each `build-*` fault holds
the builds it applies to, `*` for every one):

- `build-changes-output`: the build answers the prompts `changed_at(prompt)` selects (about
  one in eleven; of the shipped set, p02-list alone) differently from a token on (a numerics
  change flips one greedy choice, and the rest of the completion follows it);
- `build-slower`: the build prefills and decodes 1.5 times slower;
- `build-noisy`: each start of the build runs at a speed drawn between 0.6 and 1.4 times,
  each request another ±25% (its two runs of an A/B/A disagree);
- `other-traffic`: the node's /metrics shows two more running requests than the stand-in's
  own (somebody else's agents on the lane).

Timing: the first token after `TTFT_SECONDS` (+ a little per prompt character), then one token
every `TOKEN_SECONDS`, paced against the clock so a late wake-up does not slow what follows.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time

from sparkbase_lab.shims.common import faults

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler
    from typing import Any

TTFT_SECONDS = 0.02
TTFT_PER_CHAR = 0.0001
TOKEN_SECONDS = 0.002
SLOWER = 1.5
#: the faults that say which builds they apply to, and the one that adds traffic
BUILD_FAULTS = ("build-changes-output", "build-slower", "build-noisy")
OTHER_TRAFFIC = "other-traffic"
#: running requests somebody else adds under `other-traffic`
OTHER_REQUESTS = 2
#: a prompt whose hash's first byte is below this is answered otherwise by a changed build
CHANGED_BELOW = 23
#: the most tokens the stand-in generates for one request
MAX_TOKENS = 4096
_WORDS = ("the", "a", "of", "and", "to", "in", "is", "that", "it", "for", "on", "with", "as", "was",
          "at", "by", "this", "be", "from", "or", "are", "an", "which", "one", "all", "were", "there",
          "can", "more", "when", "time", "so", "about", "Paris", "number", "node", "page", "book")

_lock = threading.Lock()
_running = 0
_noise_factor: float | None = None


def build() -> str:
    """This process's engine build."""
    return os.environ.get("SPARKBASE_LAB_BUILD", "")


def fault_applies(kind: str, active: dict[str, Any] | None = None) -> bool:
    """Whether fault `kind` is on for this process's build."""
    value = (faults() if active is None else active).get(kind)
    if value is True:
        return True
    return isinstance(value, list) and ("*" in value or build() in value)


def running() -> float:
    """Running requests as the engine's gauge shows them: the stand-in's own, plus somebody
    else's under `other-traffic`."""
    extra = OTHER_REQUESTS if faults().get(OTHER_TRAFFIC) else 0
    return float(_running + extra)


def changed_at(prompt: str) -> int | None:
    """The token from which a build with `build-changes-output` answers `prompt` differently,
    or None for a prompt it answers as every build does (about ten in eleven)."""
    digest = hashlib.sha256(b"changed:" + prompt.encode()).digest()
    return 1 + digest[1] % 8 if digest[0] < CHANGED_BELOW else None


def tokens(prompt: str, count: int, changed: bool) -> list[int]:
    """The completion's token ids: the prompt's own sequence, diverging under a changed build."""
    flip = changed_at(prompt) if changed else None
    ids = []
    for index in range(count):
        digest = hashlib.sha256(f"{prompt}\0{index}".encode()).digest()
        value = int.from_bytes(digest[:4], "big") % 32000 + 100
        if flip is not None and index >= flip:
            value = (value + 7919) % 32000 + 100
        ids.append(value)
    return ids


def text_of(token: int) -> str:
    """The text of one token id."""
    return " " + _WORDS[token % len(_WORDS)]


def speed_factor(active: dict[str, Any]) -> float:
    """How much slower than the nominal build this request runs."""
    global _noise_factor
    factor = SLOWER if fault_applies("build-slower", active) else 1.0
    if fault_applies("build-noisy", active):
        if _noise_factor is None:
            _noise_factor = random.uniform(0.6, 1.4)  # noqa: S311 - a noisy engine, not a secret
        factor *= _noise_factor * random.uniform(0.75, 1.25)  # noqa: S311 - as above
    return factor


def served_model(argv: list[str]) -> str:
    """The model the stand-in serves, as `/v1/models` names it (cmd_serving.models_json):
    `--served-model-name`, else `--model-path M` (SGLang) or `vllm serve M`."""
    for flag in ("--served-model-name", "--model-path", "serve"):
        if flag in argv[:-1]:
            return argv[argv.index(flag) + 1]
    return "model"


def post(handler: BaseHTTPRequestHandler, engine: str, argv: list[str]) -> None:
    """Answer a POST (/v1/completions, else 404)."""
    global _running
    if handler.path.split("?")[0] != "/v1/completions":
        _json(handler, 404, _error(engine, "Not Found", "NotFoundError", 404))
        return
    try:
        length = int(handler.headers.get("Content-Length", "0"))
        request = json.loads(handler.rfile.read(min(length, 1 << 20)))
        prompt = request["prompt"]
        count = int(request.get("max_tokens", 16))
        if not isinstance(prompt, str) or not 0 < count <= MAX_TOKENS:
            raise ValueError("prompt must be text and max_tokens between 1 and 4096")
    except (ValueError, KeyError, TypeError) as exc:
        _json(handler, 400, _error(engine, f"invalid request: {exc}", "BadRequestError", 400))
        return
    model = served_model(argv)
    if engine == "vllm" and request.get("model") != model:
        _json(handler, 404, _error(engine, f"The model `{request.get('model')}` does not exist.",
                                   "NotFoundError", 404))
        return
    with _lock:
        _running += 1
    try:
        _complete(handler, engine, model, request, prompt, count)
    finally:
        with _lock:
            _running -= 1


def _complete(handler: BaseHTTPRequestHandler, engine: str, model: str, request: dict[str, Any],
              prompt: str, count: int) -> None:
    active = faults()
    ids = tokens(prompt, count, fault_applies("build-changes-output", active))
    factor = speed_factor(active)
    want_ids = bool(request.get("return_token_ids"))
    prompt_ids = tokens("prompt:" + prompt, len(prompt.split()) + 1, False)
    started = time.monotonic()
    time.sleep((TTFT_SECONDS + TTFT_PER_CHAR * len(prompt)) * factor)
    if not request.get("stream"):
        time.sleep(TOKEN_SECONDS * factor * (count - 1))
        _json(handler, 200, whole_answer(engine, model, ids, prompt_ids if want_ids else None, want_ids))
        return
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
    handler.send_header("Cache-Control", "no-cache")
    handler.end_headers()
    ident, created = (_hex(32) if engine == "sglang" else f"cmpl-{_hex(16)}"), int(started)
    first_at = time.monotonic()
    for index, token in enumerate(ids):
        time.sleep(max(0.0, first_at + index * TOKEN_SECONDS * factor - time.monotonic()))
        finish = "length" if index == len(ids) - 1 else None
        choice = stream_choice(engine, text_of(token), finish, [token] if want_ids else None,
                         prompt_ids if want_ids and index == 0 else None)
        if not _event(handler, {"id": ident, "object": "text_completion", "created": created, "model": model,
                                "choices": [choice], "usage": None}):
            return
    if (request.get("stream_options") or {}).get("include_usage"):
        usage = _usage(engine, len(prompt_ids), len(ids))
        _event(handler, {"id": ident, "object": "text_completion", "created": created, "model": model,
                         "choices": [], "usage": usage})
    _send(handler, b"data: [DONE]\n\n")


def stream_choice(engine: str, text: str, finish: str | None, ids: list[int] | None,
            prompt_ids: list[int] | None) -> dict[str, Any]:
    """One streamed choice, as each engine serializes it (SGLang drops unasked ids)."""
    if engine == "sglang":
        choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                                  "matched_stop": None}
        if ids is not None:
            choice["token_ids"] = ids
        if prompt_ids is not None:
            choice["prompt_token_ids"] = prompt_ids
        return choice
    return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None,
            "prompt_token_ids": prompt_ids, "token_ids": ids}


def _usage(engine: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens,
                             "total_tokens": prompt_tokens + completion_tokens,
                             "completion_tokens": completion_tokens}
    if engine == "sglang":
        usage["reasoning_tokens"] = 0
    return usage


def whole_answer(engine: str, model: str, ids: list[int], prompt_ids: list[int] | None,
           want_ids: bool) -> dict[str, Any]:
    """A non-streamed answer."""
    text = "".join(text_of(token) for token in ids)
    usage = _usage(engine, len(prompt_ids or [0, 0]), len(ids))
    created = int(time.time())
    if engine == "sglang":
        choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length",
                                  "matched_stop": None}
        if want_ids:
            choice.update(token_ids=ids, prompt_token_ids=prompt_ids)
        usage["prompt_tokens_details"] = None
        return {"id": _hex(32), "object": "text_completion", "created": created, "model": model,
                "choices": [choice], "usage": usage, "metadata": {"weight_version": "default"}}
    usage["prompt_tokens_details"] = None
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None,
              "token_ids": ids if want_ids else None, "prompt_logprobs": None,
              "prompt_token_ids": prompt_ids if want_ids else None, "routed_experts": None}
    return {"id": f"cmpl-{_hex(16)}", "object": "text_completion", "created": created, "model": model,
            "choices": [choice], "service_tier": None, "system_fingerprint": "vllm-lab-0-00000000",
            "usage": usage, "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}


def _error(engine: str, message: str, kind: str, code: int) -> dict[str, Any]:
    """An error body: vLLM's `{"error": {...}}`, SGLang's ErrorResponse."""
    if engine == "sglang":
        return {"object": "error", "message": message, "type": kind, "param": None, "code": code}
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _hex(count: int) -> str:
    return os.urandom(count // 2).hex()


def _json(handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body, separators=(",", ":")).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    _send(handler, data)


def _event(handler: BaseHTTPRequestHandler, chunk: dict[str, Any]) -> bool:
    return _send(handler, b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n")


def _send(handler: BaseHTTPRequestHandler, data: bytes) -> bool:
    """Write and flush; False when the client went away."""
    try:
        handler.wfile.write(data)
        handler.wfile.flush()
    except OSError:
        return False
    return True
