"""The lane's OpenAI-compatible API, as `qualify` uses it: the served model, one completion.

Both engines the site runs serve the same API (SGLang `python/sglang/srt/entrypoints/openai/`,
vLLM `vllm/entrypoints/openai/`): `GET /v1/models` lists the served model (vLLM refuses a
completion for any other name), `POST /v1/completions` with `"stream": true` answers with
server-sent events, each event one line `data: {JSON chunk}` followed by a blank line, and
`data: [DONE]` last. A chunk's `choices[0]` holds the new `text` and, when the request asked
`"return_token_ids": true` (vLLM since 0.10.2, SGLang since PR 30917), the new `token_ids`;
with `"stream_options": {"include_usage": true}` a last chunk with no choices carries
`usage.completion_tokens`. Older builds ignore the fields they do not know.

What is measured, as the site's own single-stream probe measures it (BRIEF.md, "What the
site takes from spark-ds41f"): time to first token, from sending the request to the first
chunk that holds generated text or tokens; decode throughput, the tokens after those of the
first such chunk over the time from it to the last one (prefill excluded).

Every answer is bounded (as `gate.metrics` bounds a scrape): `MAX_BYTES` in all, lines of at
most `MAX_LINE`, and a deadline for the whole request, connection to last byte, checked
after every read (each read waits at most what is left of it). The parsers are pure
(`StreamParser`, `parse_models`, `parse_completion`) and checked against real answers in
tests/fixtures/real/.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkbase.gate.records import Completion

#: the largest answer read (256 tokens streamed are tens of kilobytes)
MAX_BYTES = 16 * 1024 * 1024
#: the longest line of an answer (one chunk's JSON is well under a kilobyte)
MAX_LINE = 1024 * 1024
#: how long one completion may take in all (256 tokens at a few tokens/s, after a long queue)
COMPLETION_DEADLINE = 300.0
#: how long `/v1/models` may take
MODELS_DEADLINE = 10.0
_READ = 64 * 1024


class ApiError(Exception):
    """The endpoint could not be used: one line that names it (never the answer's content
    beyond an engine's own error message, shown escaped where printed)."""


@dataclass(frozen=True)
class ApiEndpoint:
    """Where a lane's API answers: `http://host:port`, on `node`."""

    node: str
    host: str
    port: int

    def url(self, path: str = "") -> str:
        """`http://HOST:PORT/PATH`, an IPv6 address in brackets."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{path}"


@dataclass(frozen=True)
class Request:
    """One completion request: the prompt and the set's sampling."""

    model: str
    prompt: str
    max_tokens: int
    seed: int
    temperature: float = 0.0
    ignore_eos: bool = True

    def body(self, stream: bool) -> dict[str, Any]:
        """The JSON body sent (token ids asked for; usage asked for when streamed)."""
        body: dict[str, Any] = {
            "model": self.model, "prompt": self.prompt, "max_tokens": self.max_tokens,
            "temperature": self.temperature, "seed": self.seed, "stream": stream,
            "return_token_ids": True,
        }
        if self.ignore_eos:
            body["ignore_eos"] = True
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body


@dataclass(frozen=True)
class Measured:
    """One streamed completion: what came back and how fast."""

    text: str
    token_ids: tuple[int, ...] | None
    tokens: int  # generated tokens (token ids, else the usage count, else content chunks)
    ttft_seconds: float
    decode_tokens_per_second: float | None  # None: fewer than two content chunks
    finish_reason: str | None

    def completion(self, prompt_id: str) -> Completion:
        """What the determinism gate hashes for this prompt."""
        return Completion(prompt_id, self.text, self.token_ids)


@dataclass
class StreamParser:
    """Reads a streamed `/v1/completions` answer as it arrives (pure: bytes and the time they
    came in; no socket). `feed` each read, then `measured(start)`.

    Each SSE event of both engines is one `data:` line (neither splits a chunk's JSON over
    several lines), so a line is read on its own: blank lines, comments (`:`) and the other
    SSE fields (`event:`, `id:`, `retry:`) carry nothing here and are skipped.
    """

    source: str = "the endpoint"
    text: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    ids_seen: bool = False
    ids_missing: bool = False  # a content chunk without token ids: the ids are not whole
    content_chunks: int = 0
    first_at: float | None = None
    last_at: float | None = None
    first_tokens: int = 0
    usage_tokens: int | None = None
    finish_reason: str | None = None
    done: bool = False
    _pending: bytes = b""
    _size: int = 0
    _line: int = 0

    def feed(self, data: bytes, at: float) -> None:
        """Take the bytes of one read, received at `at` (a monotonic clock)."""
        self._size += len(data)
        if self._size > MAX_BYTES:
            raise ApiError(f"{self.source}: answer larger than {MAX_BYTES // (1024 * 1024)} MiB")
        lines = (self._pending + data).split(b"\n")
        self._pending = lines.pop()
        if len(self._pending) > MAX_LINE:
            raise ApiError(f"{self.source}: a line of more than {MAX_LINE} bytes; not an event stream")
        for line in lines:
            self._line += 1
            self._event_line(line.rstrip(b"\r"), at)

    def close(self, at: float) -> None:
        """The answer ended: read a last line that had no newline."""
        if self._pending:
            self._line += 1
            self._event_line(self._pending.rstrip(b"\r"), at)
            self._pending = b""

    def _event_line(self, line: bytes, at: float) -> None:
        if not line.startswith(b"data:") or self.done:
            return
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            raise ApiError(f"{self.source}: event line {self._line} is not JSON") from None
        self._chunk(chunk, at)

    def _chunk(self, chunk: Any, at: float) -> None:
        if not isinstance(chunk, dict):
            raise ApiError(f"{self.source}: event line {self._line} is not a JSON object")
        _raise_engine_error(chunk, self.source)
        usage = chunk.get("usage")
        if isinstance(usage, dict) and _count(usage.get("completion_tokens")):
            self.usage_tokens = int(usage["completion_tokens"])
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return  # the usage chunk (no choices), or a chunk of engine extensions
        text, ids, finish = _choice(choices[0], self.source)
        if finish is not None:
            self.finish_reason = finish
        if not text and not ids:
            return
        self.text.append(text)
        if ids is None:
            self.ids_missing = True
        else:
            self.ids_seen = True
            self.token_ids.extend(ids)
        self.content_chunks += 1
        if self.first_at is None:
            self.first_at = at
            self.first_tokens = len(ids) if ids else 1
        self.last_at = at

    def measured(self, started: float) -> Measured:
        """The completion and its figures; `started` is when the request was sent."""
        if self.first_at is None or self.last_at is None:
            raise ApiError(f"{self.source}: the answer ended without any generated text")
        ids = tuple(self.token_ids) if self.ids_seen and not self.ids_missing else None
        tokens = len(ids) if ids is not None else self.usage_tokens or self.content_chunks
        span = self.last_at - self.first_at
        after_first = tokens - self.first_tokens
        rate = after_first / span if span > 0 and after_first > 0 else None
        return Measured("".join(self.text), ids, tokens, self.first_at - started, rate, self.finish_reason)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**9


def _choice(choice: Any, source: str) -> tuple[str, list[int] | None, str | None]:
    """A completion choice's text, token ids (None when the engine sent none) and finish reason."""
    if not isinstance(choice, dict):
        raise ApiError(f"{source}: a choice is not a JSON object")
    text = choice.get("text")
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise ApiError(f"{source}: a choice's text is not a string")
    raw_ids = choice.get("token_ids")
    ids: list[int] | None = None
    if raw_ids is not None:
        if not isinstance(raw_ids, list) or not all(_count(i) for i in raw_ids):
            raise ApiError(f"{source}: a choice's token_ids is not a list of token ids")
        ids = [int(i) for i in raw_ids]
    finish = choice.get("finish_reason")
    return text, ids, finish if isinstance(finish, str) and finish else None


def _raise_engine_error(document: dict[str, Any], source: str) -> None:
    """An engine's error answer (vLLM `{"object": "error", "message": ...}`, or `{"error":
    {"message": ...}}` as both stream it) as an `ApiError` with its message."""
    error = document.get("error")
    if isinstance(error, dict):
        message = error.get("message")
    elif document.get("object") == "error":
        message = document.get("message")
    else:
        return
    shown = message if isinstance(message, str) else "no message"
    raise ApiError(f"{source}: the engine answered an error: {shown[:300]}")


def _answer(text: str, source: str) -> dict[str, Any]:
    """An engine's JSON answer as an object; `ApiError` for anything else or an engine error."""
    try:
        document = json.loads(text)
    except ValueError:
        raise ApiError(f"{source}: not JSON") from None
    if not isinstance(document, dict):
        raise ApiError(f"{source}: not a JSON object")
    _raise_engine_error(document, source)
    return document


def parse_models(text: str, source: str = "/v1/models") -> list[str]:
    """The model ids of a `/v1/models` answer (`{"object": "list", "data": [{"id": ...}]}`)."""
    document = _answer(text, source)
    data = document.get("data")
    if not isinstance(data, list):
        raise ApiError(f"{source}: no model list (`data`)")
    ids = [entry.get("id") for entry in data if isinstance(entry, dict)]
    found = [model for model in ids if isinstance(model, str) and model]
    if not found:
        raise ApiError(f"{source}: the endpoint serves no model")
    return found


def parse_completion(text: str, source: str = "/v1/completions") -> tuple[str, tuple[int, ...] | None]:
    """The text and token ids (None when not returned) of a non-streamed completion answer."""
    document = _answer(text, source)
    choices = document.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ApiError(f"{source}: no choices in the answer")
    completion, ids, _finish = _choice(choices[0], source)
    return completion, tuple(ids) if ids is not None else None


# --- over HTTP ------------------------------------------------------------------------------

Clock = Callable[[], float]


def served_model(endpoint: ApiEndpoint, deadline_seconds: float = MODELS_DEADLINE) -> str:
    """The model the endpoint serves (the first of `/v1/models`); `ApiError` when it does not
    answer within the deadline or answers something else."""
    return parse_models(*_exchange(endpoint, "GET", "/v1/models", None, deadline_seconds))[0]


def complete(endpoint: ApiEndpoint, request: Request,
             deadline_seconds: float = COMPLETION_DEADLINE, clock: Clock = time.monotonic) -> Measured:
    """One streamed completion, measured (see the module text)."""
    source = endpoint.url("/v1/completions")
    deadline = clock() + deadline_seconds
    parser = StreamParser(source)
    connection = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=deadline_seconds)
    try:
        started = clock()
        connection.request("POST", "/v1/completions", body=json.dumps(request.body(stream=True)),
                           headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        response = connection.getresponse()
        if response.status != 200:
            raise ApiError(f"{source}: HTTP status {response.status}"
                           f"{_error_text(_read_bounded(response, connection, deadline, clock, source))}")
        while not parser.done:
            _wait_at_most(connection, deadline, clock, source)
            data = response.read1(_READ)
            if not data:
                break
            parser.feed(data, clock())
        parser.close(clock())
        return parser.measured(started)
    except (OSError, http.client.HTTPException) as exc:
        raise ApiError(f"{source}: {_network_error(exc, deadline, clock)}") from None
    finally:
        connection.close()


def complete_once(endpoint: ApiEndpoint, request: Request,
                  deadline_seconds: float = COMPLETION_DEADLINE) -> tuple[str, tuple[int, ...] | None]:
    """One completion, not streamed (the warm-up): its text and token ids."""
    return parse_completion(*_exchange(endpoint, "POST", "/v1/completions", request.body(stream=False),
                                       deadline_seconds))


def _exchange(endpoint: ApiEndpoint, method: str, path: str, body: dict[str, Any] | None,
              deadline_seconds: float, clock: Clock = time.monotonic) -> tuple[str, str]:
    """One bounded request answered with HTTP 200: the whole body as text, and where it came
    from (the URL, for messages); `ApiError` for any other answer or none."""
    source = endpoint.url(path)
    deadline = clock() + deadline_seconds
    connection = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=deadline_seconds)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=json.dumps(body) if body is not None else None,
                           headers=headers)
        response = connection.getresponse()
        answer = _read_bounded(response, connection, deadline, clock, source)
    except (OSError, http.client.HTTPException) as exc:
        raise ApiError(f"{source}: {_network_error(exc, deadline, clock)}") from None
    finally:
        connection.close()
    if response.status != 200:
        raise ApiError(f"{source}: HTTP status {response.status}{_error_text(answer)}")
    return answer.decode("utf-8", "replace"), source


def _read_bounded(response: Any, connection: Any, deadline: float, clock: Clock, source: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        _wait_at_most(connection, deadline, clock, source)
        data = response.read1(_READ)
        if not data:
            return b"".join(chunks)
        size += len(data)
        if size > MAX_BYTES:
            raise ApiError(f"{source}: answer larger than {MAX_BYTES // (1024 * 1024)} MiB")
        chunks.append(data)


def _wait_at_most(connection: Any, deadline: float, clock: Clock, source: str) -> None:
    """The next read waits at most what is left of the deadline; none left is an `ApiError`."""
    left = deadline - clock()
    if left <= 0:
        raise ApiError(f"{source}: no complete answer within the deadline")
    if connection.sock is not None:
        connection.sock.settimeout(left)


def _network_error(exc: BaseException, deadline: float, clock: Clock) -> str:
    if clock() >= deadline or isinstance(exc, TimeoutError):
        return "no complete answer within the deadline"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is the lane serving?)"
    return f"cannot reach it: {type(exc).__name__}: {exc}"[:300]


def _error_text(body: bytes) -> str:
    """`: MESSAGE` of an engine's JSON error answer, else nothing."""
    try:
        document = json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return ""
    if not isinstance(document, dict):
        return ""
    try:
        _raise_engine_error(document, "")
    except ApiError as exc:
        return ": " + str(exc).removeprefix(": the engine answered an error: ")
    return ""
