"""Scrape parsing through prometheus_client: what the library reads, what the pre-check
refuses before it, and where an error is located."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from sparkbase.gate.metrics import MAX_LINE, MetricsError, parse_scrapes

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"

PARSED = [
    # (what, line, metric, labels, value)
    ("a label value holding a closing brace", 'm{a="x}y"} 1', "m", {"a": "x}y"}, 1.0),
    ("escapes in a label value are read", 'm{a="q\\"u\\\\o\\nte"} 2', "m", {"a": 'q"u\\o\nte'}, 2.0),
    ("a trailing comma in the labels", 'm{a="1",} 3', "m", {"a": "1"}, 3.0),
    ("+Inf", "m +Inf", "m", {}, math.inf),
    ("-Inf", "m -Inf", "m", {}, -math.inf),
    ("an exponent", "m 1.5e3", "m", {}, 1500.0),
    ("a negative value past a float", "m -" + "9" * 400, "m", {}, -math.inf),
    ("an SGLang name", 'sglang:num_used_tokens{tp_rank="0"} 2150000.0', "sglang:num_used_tokens",
     {"tp_rank": "0"}, 2150000.0),
    ("a vLLM name", 'vllm:kv_cache_usage_perc{engine="0",model_name="glm"} 0.72', "vllm:kv_cache_usage_perc",
     {"engine": "0", "model_name": "glm"}, 0.72),
]


@pytest.mark.parametrize(("what", "line", "metric", "labels", "value"), PARSED, ids=[c[0] for c in PARSED])
def test_a_sample_line_as_prometheus_client_reads_it(
    what: str, line: str, metric: str, labels: dict[str, str], value: float
) -> None:
    (sample,) = parse_scrapes(line + "\n", 42.0)
    assert (sample.metric, sample.labels, sample.value, sample.time) == (metric, labels, value, 42.0)


REFUSED = [
    # (what, text, line the error names): shapes the library would take, or refuses itself
    ("three numbers", "m 1\nm 1 2 3\n", 2),
    ("a fractional timestamp", "m 1 1.5\n", 1),
    ("an exponent timestamp", "m 1 1e3\n", 1),
    ("a quoted UTF-8 name", '{"my.metric"} 1\n', 1),
    ("a name inside the labels", '{__name__="m"} 1\n', 1),
    ("a label name twice", 'm 1\nm 2\nm{a="1",a="2"} 3\n', 3),
    ("a label value without quotes", "m{a=1} 1\n", 1),
    ("two labels without a comma", 'm{a="1" b="2"} 1\n', 1),
    ("a label name that is not one", 'm{1a="x"} 1\n', 1),
    ("a value in Arabic-Indic digits", "m \u0661\u0662\n", 1),
    ("a timestamp in Devanagari digits", "m 1 \u0967\u0968\u0969\n", 1),
    ("a line longer than MAX_LINE", "m{a=\"" + "x" * MAX_LINE + "\"} 1\n", 1),
]


@pytest.mark.parametrize(("what", "text", "line"), REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_and_located(what: str, text: str, line: int) -> None:
    with pytest.raises(MetricsError, match=rf"^scrape:{line}: not Prometheus text"):
        parse_scrapes(text, 0.0, "scrape")


def test_a_repeated_bad_line_is_named_where_it_first_appears() -> None:
    text = 'm 1\nm{a="1",a="2"} 2\nm 3\nm{a="1",a="2"} 2\n'
    with pytest.raises(MetricsError, match=r"^s:2: "):
        parse_scrapes(text, 0.0, "s")


def test_one_series_over_many_scrapes_keeps_each_value() -> None:
    text = "".join(f'# scrape_time {1000 + 60 * i}\nm{{a="x\\"y"}} {i}\n' for i in range(5))
    samples = parse_scrapes(text, 0.0)
    assert [(s.value, s.time) for s in samples] == [(float(i), 1000.0 + 60 * i) for i in range(5)]
    assert all(s.labels == {"a": 'x"y'} for s in samples)


def test_repeated_lines_keep_their_own_scrape_time() -> None:
    text = "# scrape_time 1000\nm 5\n# scrape_time 1060\nm 5\nm 5 1700000000000\n"
    assert [(s.value, s.time) for s in parse_scrapes(text, 0.0)] == [
        (5.0, 1000.0), (5.0, 1060.0), (5.0, 1700000000.0)
    ]


def test_type_and_help_lines_do_not_rename_samples() -> None:
    """prometheus_client renames a typed counter's samples (`_total`); comments never reach it."""
    text = "# HELP c a counter\n# TYPE c counter\nc 7\n"
    (sample,) = parse_scrapes(text, 0.0)
    assert sample.metric == "c"


def test_a_comment_of_long_whitespace_runs_is_read_in_linear_time() -> None:
    """The library splits `#     …` one character at a time with a copy each: quadratic."""
    text = ("#" + " " * (MAX_LINE - 3) + "x\n") * 64
    started = time.monotonic()
    assert parse_scrapes(text, 0.0) == []
    assert time.monotonic() - started < 5


def test_the_shipped_fixtures_read_as_before() -> None:
    """Every sample of the saved SGLang/vLLM scrapes, with its scrape time."""
    samples = parse_scrapes((FIXTURES / "four-500k-sessions.prom").read_text(), 0.0)
    running = [s for s in samples if s.metric == "sglang:num_running_reqs"]
    assert len(running) == 4 * 13 and running[0].time == 1767225600.0
    assert running[0].labels == {"engine_type": "unified", "model_name": "deepseek-v4.1-flash",
                                 "pp_rank": "0", "tp_rank": "0"}
    vllm = parse_scrapes((FIXTURES / "vllm-four-500k-sessions.prom").read_text(), 0.0,
                         metrics={"vllm:cache_config_info"})
    assert vllm and all(s.labels["num_gpu_blocks"] == "187500" for s in vllm)
