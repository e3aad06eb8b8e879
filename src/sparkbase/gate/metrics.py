"""Prometheus scrapes for the session-load triggers, read with bounds and parsed strictly.

`--metrics` names a saved text file or an http(s) URL. Both are untrusted input:

- a file must be a regular file (a FIFO, `/dev/zero`, a directory are refused before a
  byte is read) of at most `MAX_BYTES`;
- a URL's whole answer must arrive within `DEADLINE_SECONDS` (a server that trickles one
  byte a second is cut off at the deadline) and be at most `MAX_BYTES`;
- the text must be UTF-8 Prometheus exposition; anything else is one `MetricsError` that
  names the source and line and never echoes what the file holds (`--metrics /etc/shadow`
  must not print a password hash).

Each series (metric name and labels) is parsed by prometheus_client
(`text_string_to_metric_families`: the name checked, label names checked, label values
unescaped). What stays here, and why:

- the walk over lines, so an error names its line and `# scrape_time` comments (how a
  saved series marks its scrapes) date the samples below them; comments never reach the
  library, which also splits a comment line in time quadratic in its runs of whitespace;
- a line-length cap (`MAX_LINE`): the library scans a line character by character;
- one shape check per sample line (`_SAMPLE`), because the library is lenient where a
  scrape must not be: it takes `m 1 2 3` (first and last token), a fractional, `NaN` or
  exponent timestamp, and quoted UTF-8 metric names; the engines' metric names are legacy
  names, and a timestamp is integer milliseconds;
- the value and timestamp, once the shape check has held them to Prometheus' number
  syntax, are converted with `float()` and `int()`: the library costs about 0.1 ms a line
  even for `m 1` (measured, loaded machine: 50,000 samples of 4 series took 27 s with the
  library reading every line, 4 s reading each series once), and a series' name and labels
  repeat scrape after scrape. A value past a float (400 digits) is +/-Inf, as in Prometheus.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import math
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit, urlunsplit

from sparkbase.boundedfile import FileRefused, Refusal, read_regular_file

if TYPE_CHECKING:
    import urllib.error
    import urllib.request

    from prometheus_client.samples import Sample as LibrarySample

#: the largest scrape read, file or HTTP body (a real scrape is kilobytes)
MAX_BYTES = 16 * 1024 * 1024
#: the most samples of the wanted metrics kept (bounds memory for a hostile file)
MAX_SAMPLES = 200_000
#: how long a URL may take in all, connection to last byte
DEADLINE_SECONDS = 10.0
_CHUNK = 64 * 1024
#: the longest line read (a real scrape's lines are well under a kilobyte)
MAX_LINE = 64 * 1024
#: sample times outside this range (Unix seconds, year ~5138) are not a real scrape
_MAX_TIME = 1e11


class MetricsError(Exception):
    """Metrics that cannot be used; the message is one line, located, without file content."""


#: the most of an error answer's body kept (a Prometheus API error is a short JSON object)
MAX_ERROR_BODY = 64 * 1024


class HttpStatusError(MetricsError):
    """An answer with an HTTP error status; the message names the status only, `body` keeps
    the first `MAX_ERROR_BODY` bytes of the answer for a caller that knows its format."""

    def __init__(self, message: str, status: int, body: bytes) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


@dataclass(frozen=True)
class Sample:
    """One Prometheus sample: metric, labels, value, time (seconds)."""

    metric: str
    labels: dict[str, str]
    value: float
    time: float


_FLOAT = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN"
#: a sample line's shape: legacy metric name, optional labels (quoted values may hold `}`),
#: one value, optional integer-millisecond timestamp (no alternative can match the same
#: character, so the match is linear in the line)
_SAMPLE = re.compile(
    r'(?P<series>(?P<metric>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?)[ \t]+'
    rf"(?P<value>{_FLOAT})(?:[ \t]+(?P<ts>-?\d{{1,19}}))?[ \t]*",
    re.ASCII,  # digits are 0-9 (float() and int() would read other scripts' digits too)
)
_SCRAPE_TIME = re.compile(
    r"#[ \t]*scrape(?:d_at|_time)?(?:[=:][ \t]*|[ \t]+)(?P<t>\d{1,15}(?:\.\d{1,9})?)[ \t]*",
    re.IGNORECASE,
)
_SAMPLE_SHAPE = "a sample line reads `metric{label=\"value\"} VALUE [TIMESTAMP_MS]`"


def shown_source(source: str) -> str:
    """The source as it may be printed: a URL's user:password part masked."""
    if not is_url(source):
        return source
    parts = urlsplit(source)
    if parts.username is None and parts.password is None:
        return source
    host = parts.hostname or ""
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def is_url(source: str) -> bool:
    """`source` names an http(s) URL rather than a file."""
    return source.startswith(("http://", "https://"))


def load_metrics(source: str, deadline_seconds: float | None = None) -> str:
    """The text of a scrape from a file or an http(s) URL, bounded; `MetricsError` otherwise.
    A URL's deadline is `deadline_seconds`, else `DEADLINE_SECONDS`."""
    if is_url(source):
        data = fetch_url(source, DEADLINE_SECONDS if deadline_seconds is None else deadline_seconds)
    else:
        data = read_file(source)
    return decode(data, shown_source(source))


def read_file(path: str) -> bytes:
    """A regular file's bytes, at most `MAX_BYTES`; anything else refused before reading."""
    try:
        return read_regular_file(path, MAX_BYTES)
    except FileRefused as exc:
        if exc.refusal is Refusal.NOT_REGULAR:
            raise MetricsError(f"{path}: not a regular file ({exc.detail}); give a saved scrape") from None
        if exc.refusal is Refusal.TOO_BIG:
            mib = MAX_BYTES // (1024 * 1024)
            raise MetricsError(f"{path}: larger than {mib} MiB; not a scrape") from None
        raise MetricsError(f"{path}: cannot open: {exc.detail}") from None


def fetch_url(url: str, deadline_seconds: float) -> bytes:
    """The body of `url`, complete within `deadline_seconds` and at most `MAX_BYTES`.

    The request runs in a daemon thread so the deadline holds for every phase (connect,
    headers, body), whatever the server does; a late answer is abandoned, not awaited.
    """
    shown = shown_source(url)
    outcome: list[bytes | MetricsError] = []
    deadline = time.monotonic() + deadline_seconds
    worker = threading.Thread(
        target=lambda: outcome.append(_fetch(url, shown, deadline)), daemon=True, name="metrics-fetch"
    )
    worker.start()
    worker.join(deadline_seconds)
    if not outcome:
        raise MetricsError(f"{shown}: no complete answer within {deadline_seconds:g} s")
    result = outcome[0]
    if isinstance(result, MetricsError):
        raise result
    return result


def authorized_request(url: str) -> urllib.request.Request:
    """A GET of `url`; a `user:password@` in it becomes HTTP basic authentication (sent as a
    header, each part percent-decoded), never part of the host name."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) URL: {parts.scheme}")
    if parts.username is None and parts.password is None:
        return urllib.request.Request(url)  # noqa: S310 - http(s) only (above)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    bare = urlunsplit(parts._replace(netloc=host + (f":{parts.port}" if parts.port else "")))
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}".encode()
    header = {"Authorization": "Basic " + base64.b64encode(pair).decode()}
    return urllib.request.Request(bare, headers=header)  # noqa: S310 - http(s) only (above)


def _fetch(url: str, shown: str, deadline: float) -> bytes | MetricsError:
    """One bounded GET (runs in the worker thread; errors are returned, not raised)."""
    try:
        remaining = max(deadline - time.monotonic(), 0.01)
        with urllib.request.urlopen(authorized_request(url), timeout=remaining) as response:  # noqa: S310
            chunks: list[bytes] = []
            size = 0
            while time.monotonic() < deadline:
                chunk = response.read1(_CHUNK)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_BYTES:
                    return MetricsError(f"{shown}: answer larger than {MAX_BYTES // (1024 * 1024)} MiB")
            return MetricsError(f"{shown}: answer not complete within the deadline")
    except urllib.error.HTTPError as exc:
        return HttpStatusError(f"{shown}: HTTP status {exc.code}", exc.code, _error_body(exc))
    except urllib.error.URLError as exc:
        return MetricsError(f"{shown}: cannot fetch: {exc.reason}")
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return MetricsError(f"{shown}: cannot fetch: {type(exc).__name__}")


def _error_body(answer: urllib.error.HTTPError) -> bytes:
    """At most `MAX_ERROR_BODY` bytes of an error answer; nothing if it cannot be read."""
    try:
        return answer.read(MAX_ERROR_BODY)
    except (OSError, http.client.HTTPException, ValueError):
        return b""


def decode(data: bytes, source: str) -> str:
    """UTF-8 text, or a `MetricsError` naming the line that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise MetricsError(f"{source}:{line}: not Prometheus text (not UTF-8)") from None


def parse_scrapes(
    text: str, default_time: float, source: str = "metrics", metrics: Collection[str] | None = None
) -> list[Sample]:
    """Prometheus text exposition, one or more scrapes; every line is checked.

    A sample's own timestamp (milliseconds) wins; otherwise the latest `# scrape_time <unix
    seconds>` comment above it; otherwise `default_time`. Only samples of `metrics` are kept
    (all when None). Errors name `source` and the line, never its content.
    """
    kept = _sample_lines(text, default_time, source, metrics)
    series = _series_once(kept, source)
    samples: list[Sample] = []
    for line in kept:
        name, labels = series[line.series]
        when = line.scrape_time
        if line.timestamp is not None:
            when = _checked_time(int(line.timestamp) / 1000.0, source, line.number)
        samples.append(Sample(name, dict(labels), float(line.value), when))
    return samples


@dataclass(frozen=True)
class _Line:
    """A sample line whose shape holds: its parts as text, where it is, the scrape above it."""

    series: str
    value: str
    timestamp: str | None
    number: int
    scrape_time: float


def _sample_lines(
    text: str, default_time: float, source: str, metrics: Collection[str] | None
) -> list[_Line]:
    """The sample lines of `metrics`, each with its line number and the scrape time above
    it; every line's shape checked, comments read for `# scrape_time`."""
    kept: list[_Line] = []
    current = default_time
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip(" \t\r")
        if not line:
            continue
        if len(line) > MAX_LINE:
            raise MetricsError(f"{source}:{number}: not Prometheus text (a line of more than {MAX_LINE} "
                               "characters)")
        if line.startswith("#"):
            marker = _SCRAPE_TIME.fullmatch(line)
            if marker:
                current = _checked_time(float(marker["t"]), source, number)
            continue
        shape = _SAMPLE.fullmatch(line)
        if shape is None:
            raise MetricsError(f"{source}:{number}: not Prometheus text ({_SAMPLE_SHAPE})")
        if metrics is not None and shape["metric"] not in metrics:
            continue
        if len(kept) >= MAX_SAMPLES:
            raise MetricsError(f"{source}:{number}: more than {MAX_SAMPLES} samples; not one scrape")
        kept.append(_Line(shape["series"], shape["value"], shape["ts"], number, current))
    return kept


def _series_once(kept: list[_Line], source: str) -> dict[str, tuple[str, dict[str, str]]]:
    """Name and labels of each distinct series as prometheus_client reads them; a series it
    refuses is a `MetricsError` at the first line that holds it."""
    distinct = list(dict.fromkeys(line.series for line in kept))
    parsed = _library_samples([f"{series} 0" for series in distinct])
    if len(parsed) != len(distinct):
        refused = distinct[_first_refused(distinct, start=len(parsed))]
        number = next(line.number for line in kept if line.series == refused)
        raise MetricsError(f"{source}:{number}: not Prometheus text ({_SAMPLE_SHAPE})")
    return {series: (sample.name, sample.labels) for series, sample in zip(distinct, parsed, strict=True)}


def _library_samples(lines: list[str]) -> list[LibrarySample]:
    """prometheus_client's samples of `lines` (no comments among them, so each line is one
    untyped sample, in order), up to the first line it refuses."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: list[LibrarySample] = []
    # whatever the library raises, the line it was reading is not a sample: the caller names it
    with contextlib.suppress(Exception):
        for family in text_string_to_metric_families("\n".join(lines)):
            samples.extend(family.samples)
    return samples


def _first_refused(series: list[str], start: int) -> int:
    """Index of the first series from `start` on that is not exactly one sample on its own
    (the library yields each sample as it reads its line, so that is the one at `start`)."""
    for index in range(start, len(series)):
        if len(_library_samples([f"{series[index]} 0"])) != 1:
            return index
    return min(start, len(series) - 1)


def _checked_time(seconds: float, source: str, number: int) -> float:
    if not math.isfinite(seconds) or abs(seconds) > _MAX_TIME:
        raise MetricsError(f"{source}:{number}: timestamp out of range (not a Unix time)")
    return seconds
