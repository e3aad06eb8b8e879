"""The site's Prometheus asked for a window of history (HTTP API `/api/v1/query_range`).

A session-load trigger is judged over a window (`window_minutes`): one scrape cannot say
whether a load was sustained. `sparkbase triggers --prometheus URL` asks the site's
Prometheus, for each metric the trigger reads (the engines' own names, as the lane exports
them), the series over the window at a regular step; the samples are then counted exactly as
a saved series is (`sparkbase.gate.triggers`), one sample time per step.

The answer is untrusted input, bounded as a scrape is (`sparkbase.gate.metrics.fetch_url`:
the whole answer within `DEADLINE_SECONDS`, at most 16 MiB) and read strictly: the API's
JSON envelope (`status`, `data.resultType`, `data.result`), each series' `metric` labels and
its `values` as `[unix seconds, "value"]` pairs (a value is a string, as `NaN` and `+Inf`
are not JSON numbers). An error answer (`"status": "error"`, HTTP 400, 422 or 503 with the
envelope) is one `PrometheusError` naming its `errorType` and `error`, shown escaped. The
format is Prometheus' docs/querying/api.md ("Format overview", "Range vectors").
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from sparkbase.gate.metrics import (
    MAX_SAMPLES,
    HttpStatusError,
    MetricsError,
    Sample,
    decode,
    fetch_url,
    shown_source,
)
from sparkbase.text import shown

#: how long one query may take in all, connection to last byte
DEADLINE_SECONDS = 10.0
#: the finest step asked for (Prometheus' default scrape interval)
MIN_STEP_SECONDS = 15
#: the most steps one window is cut into (a week is then read every 5 min 3 s)
MAX_STEPS = 2000
#: the most characters of a Prometheus error message shown
_MAX_SHOWN = 300
#: a sample value as the API writes it: Go's strconv.FormatFloat 'f' or 'e', NaN, +/-Inf
_VALUE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN", re.ASCII)
#: sample times outside this range (Unix seconds) are not a real answer
_MAX_TIME = 1e11


class PrometheusError(Exception):
    """Prometheus could not be asked, or its answer is not usable; one line, no traceback."""


@dataclass(frozen=True)
class RangeWindow:
    """The times asked for: every `step` seconds from `start` to `end` (whole seconds)."""

    start: int
    end: int
    step: int

    @property
    def steps(self) -> int:
        """How many sample times the window holds (both ends included)."""
        return (self.end - self.start) // self.step + 1


@dataclass(frozen=True)
class RangeAnswer:
    """The samples of every metric asked for over one window, and the server's warnings."""

    samples: list[Sample]
    warnings: tuple[str, ...] = ()


def window_ending(end: float, minutes: int) -> RangeWindow:
    """The window of `minutes` ending at `end`, cut into steps of at least `MIN_STEP_SECONDS`
    and at most `MAX_STEPS` of them."""
    span = minutes * 60
    step = max(MIN_STEP_SECONDS, math.ceil(span / MAX_STEPS))
    last = int(end)
    return RangeWindow(start=last - span, end=last, step=step)


def api_url(base: str, endpoint: str, params: dict[str, str]) -> str:
    """`BASE/api/v1/ENDPOINT?PARAMS`; `base` is the server's http(s) URL (a path prefix kept)."""
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PrometheusError(f"{shown_source(base)}: not an http(s) URL of a Prometheus server")
    if parts.query or parts.fragment:
        raise PrometheusError(f"{shown_source(base)}: give the server's URL without a query or fragment")
    return f"{base.rstrip('/')}/api/v1/{endpoint}?{urlencode(params)}"


def query_range(base: str, metrics: Collection[str], window: RangeWindow) -> RangeAnswer:
    """Every series of `metrics` over `window` (one range query per metric name, in order)."""
    samples: list[Sample] = []
    warnings: list[str] = []
    for metric in sorted(metrics):
        params = {"query": metric, "start": str(window.start), "end": str(window.end),
                  "step": str(window.step)}
        answer = ask(api_url(base, "query_range", params), f"{shown_source(base)} ({metric})")
        samples += answer[0]
        warnings += answer[1]
        if len(samples) > MAX_SAMPLES:
            raise PrometheusError(f"{shown_source(base)}: more than {MAX_SAMPLES} samples over the window; "
                                  "narrow the series the lane exports")
    return RangeAnswer(samples, tuple(dict.fromkeys(warnings)))


def ask(url: str, source: str) -> tuple[list[Sample], list[str]]:
    """One bounded GET of the API: its samples and warnings, or `PrometheusError`."""
    try:
        body = fetch_url(url, DEADLINE_SECONDS)
    except HttpStatusError as exc:
        reason = _error_of(exc.body)
        said = f": {reason}" if reason else ""
        raise PrometheusError(f"{source}: HTTP status {exc.status}{said}") from None
    except MetricsError as exc:
        raise PrometheusError(_without_url(str(exc), url, source)) from None
    try:
        text = decode(body, source)
    except MetricsError:
        raise PrometheusError(f"{source}: not a Prometheus API answer (not UTF-8)") from None
    return parse_answer(text, source)


def _without_url(message: str, url: str, source: str) -> str:
    """A fetch error names the whole query URL; the source says it in fewer words."""
    return message.replace(shown_source(url), source, 1)


def _error_of(body: bytes) -> str:
    """`errorType: error` of an API error envelope, shown escaped; empty if it is not one."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return ""
    if not isinstance(data, dict) or data.get("status") != "error":
        return ""
    return _shown_error(data)


def _shown_error(data: dict[str, Any]) -> str:
    kind, error = data.get("errorType"), data.get("error")
    text = f"{kind}: {error}" if isinstance(kind, str) and kind else str(error)
    return shown(text[:_MAX_SHOWN] + ("…" if len(text) > _MAX_SHOWN else ""))


def parse_answer(text: str, source: str = "prometheus") -> tuple[list[Sample], list[str]]:
    """The samples of an API answer (`matrix` of a range query, or `vector` of an instant one)
    and its warnings; anything else is a `PrometheusError` that never echoes the answer."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise PrometheusError(f"{source}: not a Prometheus API answer (not JSON)") from None
    if not isinstance(data, dict) or data.get("status") not in ("success", "error"):
        raise PrometheusError(f"{source}: not a Prometheus API answer (no status success or error)")
    if data["status"] == "error":
        raise PrometheusError(f"{source}: Prometheus error: {_shown_error(data)}")
    warnings = data.get("warnings") or []
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise PrometheusError(f"{source}: not a Prometheus API answer (warnings are not strings)")
    body = data.get("data")
    if not isinstance(body, dict) or not isinstance(body.get("result"), list):
        raise PrometheusError(f"{source}: not a Prometheus API answer (no data.result list)")
    kind = body.get("resultType")
    if kind not in ("matrix", "vector"):
        raise PrometheusError(f"{source}: a {shown(str(kind))[:40]} result, not series (matrix or vector)")
    samples: list[Sample] = []
    for number, series in enumerate(body["result"], start=1):
        samples += _series_samples(series, kind, f"{source}: series {number}")
        if len(samples) > MAX_SAMPLES:
            raise PrometheusError(f"{source}: more than {MAX_SAMPLES} samples")
    return samples, [shown(w[:_MAX_SHOWN]) for w in warnings]


def _series_samples(series: Any, kind: str, where: str) -> list[Sample]:
    """One series' samples: its labels without `__name__`, which names its metric."""
    if not isinstance(series, dict) or not isinstance(series.get("metric"), dict):
        raise PrometheusError(f"{where}: no metric labels")
    labels = series["metric"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise PrometheusError(f"{where}: a label that is not a string")
    name = labels.get("__name__", "")
    points = series.get("values") if kind == "matrix" else [series.get("value")]
    if not isinstance(points, list):
        raise PrometheusError(f"{where}: no {'values' if kind == 'matrix' else 'value'}")
    own = {k: v for k, v in labels.items() if k != "__name__"}
    return [Sample(name, dict(own), *_point(point, where)) for point in points]


def _point(point: Any, where: str) -> tuple[float, float]:
    """(value, time) of a `[unix seconds, "value"]` pair."""
    if not (isinstance(point, list) and len(point) == 2):
        raise PrometheusError(f"{where}: a point that is not [time, \"value\"]")
    when, value = point
    if isinstance(when, bool) or not isinstance(when, int | float) or not math.isfinite(when) \
            or abs(when) > _MAX_TIME:
        raise PrometheusError(f"{where}: a point time that is not Unix seconds")
    if not isinstance(value, str) or not _VALUE.fullmatch(value):
        raise PrometheusError(f"{where}: a point value that is not a number in quotes")
    return float(value), float(when)
