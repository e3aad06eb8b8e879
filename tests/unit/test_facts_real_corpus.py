"""Every parser against the real-output corpus (tests/fixtures/real/): each sample parses
to the verdict a person wrote for it in verdicts.yaml, and every sample has a verdict.

Fact samples name a parser of a module of `sparkbase.facts.parsers`; engine metrics samples name a
`reader` (below): the scrape read by `sparkbase.gate.metrics` and then by what the
re-open triggers do with it."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from sparkbase.facts import parsers
from sparkbase.gate.metrics import parse_scrapes
from sparkbase.gate.prometheus import PrometheusError, parse_answer
from sparkbase.gate.triggers import cache_tokens, sglang_group_values, sglang_loads, vllm_loads
from sparkbase.model.site import load_site
from sparkbase.model.site_rules import SessionLoadTrigger
from sparkbase.qualify.client import StreamParser, parse_completion, parse_models

REAL = Path(__file__).parents[1] / "fixtures" / "real"
#: files of the corpus that are not samples
NOT_SAMPLES = {"SOURCE.md", "verdicts.yaml"}
SAMPLES: list[dict[str, Any]] = YAML(typ="safe").load((REAL / "verdicts.yaml").read_text())["samples"]

#: the modules of `sparkbase.facts.parsers`, where a sample's parser is found by its name
PARSER_MODULES = [importlib.import_module(f"{parsers.__name__}.{info.name}")
                  for info in pkgutil.iter_modules(parsers.__path__)]


def plain(value: Any) -> Any:
    """A parsed value as the plain data verdicts are written in."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, frozenset | set):
        return sorted(plain(v) for v in value)
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def mismatches(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Where `actual` differs from the verdict (a mapping in the verdict names a subset)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where or '.'}: expected a mapping, got {actual!r}"]
        return [m for key, value in expected.items()
                for m in (mismatches(value, actual[key], f"{where}.{key}") if key in actual
                          else [f"{where}.{key}: missing in {sorted(actual)}"])]
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{where or '.'}: expected {len(expected)} items, got {actual!r}"]
        return [m for i, (e, a) in enumerate(zip(expected, actual, strict=True))
                for m in mismatches(e, a, f"{where}[{i}]")]
    return [] if expected == actual else [f"{where or '.'}: expected {expected!r}, got {actual!r}"]


def _text(sample: dict[str, Any]) -> str:
    text = (REAL / str(sample["file"])).read_text()
    prop = (sample.get("text_from") or {}).get("property")
    if prop is None:
        return text
    values = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{prop}=")]
    return values[-1]


def _args(sample: dict[str, Any]) -> dict[str, Any]:
    return {key: (REAL / value["file"]).read_text() if isinstance(value, dict) and "file" in value else value
            for key, value in (sample.get("args") or {}).items()}


def _project(result: Any, how: dict[str, Any]) -> Any:
    value = result[how["field"]]
    octets = value.split(":")
    return {"count": len(octets), "first": ":".join(octets[:4]), "last": ":".join(octets[-3:])}


def _id(sample: dict[str, Any]) -> str:
    return f"{sample['file']}:{sample.get('parser') or sample.get('reader')}"


def _session_trigger() -> SessionLoadTrigger:
    """The shipped site's session-load trigger (its metric names and session size)."""
    site = load_site(Path(__file__).parents[2])
    return next(t for t in site.rules.triggers if isinstance(t, SessionLoadTrigger))


def _session_loads(text: str) -> list[dict[str, Any]]:
    """What the session-load trigger reads from a scrape: per engine instance, running
    requests, KV-cache tokens in use and the long sessions they can hold."""
    trigger = _session_trigger()
    samples = parse_scrapes(text, 0.0)
    return [{"engine": load.engine, "instance": load.instance, "running": load.running,
             "kv_tokens": load.kv_tokens, "long_sessions": load.long_sessions(trigger.min_context_tokens)}
            for _when, load in sglang_loads(trigger, samples) + vllm_loads(trigger, samples)]


def _sglang_groups(text: str, metric: str) -> dict[str, float]:
    """One SGLang gauge read once per scheduler group, as the trigger reads its two."""
    values = sglang_group_values(parse_scrapes(text, 0.0), metric)
    return {key: value for (_when, key), value in values.items()}


def _vllm_cache_tokens(text: str) -> list[float | None]:
    """The KV-cache size in tokens of each vLLM cache info sample."""
    return [cache_tokens(sample.labels) for sample in parse_scrapes(text, 0.0)
            if sample.metric == "vllm:cache_config_info"]


def _pasted_json(text: str, json_span: bool) -> str:
    """The JSON a person pasted: with `json_span`, from its first `{` to its last `}` (what the
    shell put around it on the page, a prompt or zsh's `%`, left out)."""
    return text[text.index("{"): text.rindex("}") + 1] if json_span else text


def _openai_models(text: str, json_span: bool = False) -> list[str]:
    """The model ids `qualify` reads from a `/v1/models` answer."""
    return parse_models(_pasted_json(text, json_span))


def _openai_completion(text: str, json_span: bool = False) -> dict[str, Any]:
    """The text and token ids `qualify` reads from a non-streamed `/v1/completions` answer."""
    completion, token_ids = parse_completion(_pasted_json(text, json_span))
    return {"text": completion, "token_ids": token_ids}


def _openai_stream(text: str) -> dict[str, Any]:
    """A streamed `/v1/completions` answer read as `qualify` reads it, each line arriving
    0.1 s after the one before (line N at N x 0.1 s; the request sent at 0); figures to the
    microsecond."""
    parser = StreamParser("sample")
    for number, line in enumerate(text.encode().split(b"\n"), start=1):
        parser.feed(line + b"\n", number * 0.1)
    parser.close(0.0)
    measured = plain(parser.measured(0.0))
    return {key: round(value, 6) if isinstance(value, float) else value for key, value in measured.items()}


def _prometheus_answer(text: str) -> dict[str, Any]:
    """A Prometheus API answer as `triggers --prometheus` reads it: its samples and warnings,
    or the error it is refused with (the source prefix left out)."""
    try:
        samples, warnings = parse_answer(text, "sample")
    except PrometheusError as exc:
        return {"error": str(exc).removeprefix("sample: ")}
    return {"samples": samples, "warnings": warnings}


#: readers of engine samples, by the name verdicts.yaml gives as `reader`: metrics as the
#: re-open triggers read them, API answers as `qualify` and `triggers --prometheus` read them
READERS = {"session_loads": _session_loads, "sglang_groups": _sglang_groups,
           "vllm_cache_tokens": _vllm_cache_tokens, "openai_models": _openai_models,
           "openai_completion": _openai_completion, "openai_stream": _openai_stream,
           "prometheus_answer": _prometheus_answer}


def test_every_sample_has_a_verdict_and_a_source() -> None:
    files = {path.name for path in REAL.iterdir()} - NOT_SAMPLES
    judged = {sample["file"] for sample in SAMPLES}
    assert files - judged == set(), "samples without a verdict"
    assert judged - files == set(), "verdicts without a sample"
    source = (REAL / "SOURCE.md").read_text()
    unsourced = sorted(name for name in files if name not in source)
    assert unsourced == [], "samples not named in SOURCE.md"
    for sample in SAMPLES:
        assert sample.get("verdict") or sample.get("unused_because"), sample["file"]
        assert not (sample.get("parser") and sample.get("reader")), sample["file"]


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s.get("parser")], ids=_id)
def test_sample_parses_to_the_verdict(sample: dict[str, Any]) -> None:
    name = sample["parser"]
    parser = next(vars(module)[name] for module in PARSER_MODULES if name in vars(module))
    text, args = _text(sample), _args(sample)
    if sample["expect"] == "error":
        with pytest.raises(ValueError):
            parser(text, **args)
        return
    result = parser(text, **args)
    if "project" in sample:
        result = _project(result, sample["project"])
    actual = plain(result)
    assert mismatches(sample["expect"], actual) == []
    for field, part in (sample.get("contains") or {}).items():
        assert part in str(actual[field])


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s.get("reader")], ids=_id)
def test_metrics_sample_reads_to_the_verdict(sample: dict[str, Any]) -> None:
    reader = READERS[sample["reader"]]
    actual = plain(reader(_text(sample), **_args(sample)))  # type: ignore[operator]
    assert mismatches(sample["expect"], actual) == []
