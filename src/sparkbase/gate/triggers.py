"""Re-open triggers with evidence: the site's written conditions for looking at a rejected
decision again, evaluated against the site contract, the live fleet and Prometheus scrapes
(read and parsed by `sparkbase.gate.metrics`)."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkbase.gate.metrics import Sample
from sparkbase.model.provenance import describe

if TYPE_CHECKING:
    from sparkbase.model.site import Site
    from sparkbase.model.site_rules import KernelPinTrigger, SessionLoadField, SessionLoadTrigger

FIRED = "fired"
QUIET = "quiet"
UNKNOWN = "unknown"

#: exit status of `sparkbase triggers`: none fired and every trigger was judged
EXIT_QUIET = 0
#: at least one trigger fired
EXIT_FIRED = 1
#: none fired, but at least one could not be judged (no metrics, or none it reads): never "quiet"
EXIT_UNKNOWN = 4


@dataclass(frozen=True)
class TriggerVerdict:
    """Whether a trigger fired, why (evidence), and what it re-opens."""

    id: str
    kind: str
    status: str  # fired | quiet | unknown
    description: str
    reopens: str
    evidence: list[str] = field(default_factory=list)

    @property
    def fired(self) -> bool:
        """The trigger's condition holds."""
        return self.status == FIRED


#: The labels that tell apart the schedulers of one SGLang batch. SGLang labels a
#: scheduler's gauges model_name, engine_type, tp_rank, pp_rank (and moe_ep_rank), plus
#: dp_rank under data parallelism (sgl-project/sglang
#: python/sglang/srt/managers/scheduler_metrics_mixin.py `init_metrics`, 01bb3c8); the
#: `pid` label is prometheus_client's, one per process in multiprocess mode. The schedulers
#: that differ only in these run one batch over one KV cache (a TP group; the PP stages of
#: it), so the group is read once, at its lowest pp_rank and tp_rank. dp_rank is not among
#: them: with data-parallel attention every DP rank runs its own batch and cache (its
#: schedulers are tp_rank = dp_rank x attention-TP size + attention-TP rank,
#: python/sglang/srt/layers/dp_attention.py `compute_dp_attention_world_info`, and only
#: attention-TP rank 0 of each reports unless --enable-metrics-for-all-schedulers), so
#: DP ranks are summed.
_SGLANG_GROUP_LABELS = ("tp_rank", "pp_rank", "moe_ep_rank", "pid")
#: the label naming the node a sample was scraped from (Prometheus' target label, which
#: `sparkbase.gate.lane_metrics` adds to every scraped sample)
_INSTANCE = "instance"
#: a rank label that is not a number sorts after every real rank
_NO_RANK = 1 << 62


@dataclass(frozen=True)
class InstanceLoad:
    """One engine instance at one sample time: what it runs and what KV cache it holds."""

    engine: str  # sglang | vllm
    instance: str  # the instance's identifying labels, for evidence
    running: float
    kv_tokens: float | None  # None: the scrape does not say (vLLM without its cache info)

    @property
    def name(self) -> str:
        """The engine and the instance's labels, for evidence."""
        return f"{self.engine} {self.instance or '(no labels)'}"

    def long_sessions(self, min_tokens: int) -> int | None:
        """The most sessions of at least `min_tokens` tokens this instance can hold at once.
        No running request is no session, whatever the scrape lacks (its KV-cache reading)."""
        if self.running == 0:
            return 0
        if self.kv_tokens is None or not all(
            math.isfinite(v) and v >= 0 for v in (self.running, self.kv_tokens)
        ):
            return None  # not a reading: +Inf, NaN or negative counts nothing
        return max(0, min(int(self.running), int(self.kv_tokens // min_tokens)))


def _key(labels: dict[str, str], drop: tuple[str, ...] = ()) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in drop)


def key_label(key: str, name: str) -> str:
    """The value of label `name` in a series key `_key` made ("" when it has none)."""
    for part in key.split(","):
        label, _, value = part.partition("=")
        if label == name:
            return value
    return ""


def _by_instance(samples: list[Sample], metric: str) -> dict[tuple[float, str], float]:
    return {(s.time, _key(s.labels)): s.value for s in samples if s.metric == metric}


def _rank(labels: dict[str, str], name: str) -> int:
    value = labels.get(name, "0")
    return int(value) if _count(value) else _NO_RANK


def sglang_group_values(samples: list[Sample], metric: str) -> dict[tuple[float, str], float]:
    """(time, instance) -> value of `metric`, once per SGLang scheduler group: the series of
    its lowest pp_rank and tp_rank (`_SGLANG_GROUP_LABELS`); each DP rank is its own group.

    A group may span nodes (a TP or PP group over several Sparks, each node's scrape labelled
    with its `instance`): a node whose series all rank above the group's lowest reports a
    member of that group and is not counted again. Nodes reporting the same lowest rank run
    engines of their own, and each counts.
    """
    chosen: dict[tuple[float, str, str], tuple[tuple[int, int], str, float]] = {}
    for s in samples:
        if s.metric != metric:
            continue
        group = _key(s.labels, (*_SGLANG_GROUP_LABELS, _INSTANCE))
        where = (s.time, group, s.labels.get(_INSTANCE, ""))
        rank = (_rank(s.labels, "pp_rank"), _rank(s.labels, "tp_rank"))
        if where not in chosen or rank < chosen[where][0]:
            chosen[where] = (rank, _key(s.labels, _SGLANG_GROUP_LABELS), s.value)
    lowest: dict[tuple[float, str], tuple[int, int]] = {}
    for (when, group, _node), (rank, _name, _value) in chosen.items():
        lowest[(when, group)] = min(rank, lowest.get((when, group), rank))
    return {(when, name): value for (when, group, _node), (rank, name, value) in chosen.items()
            if rank == lowest[(when, group)]}


def sglang_loads(trigger: SessionLoadTrigger, samples: list[Sample]) -> list[tuple[float, InstanceLoad]]:
    """(time, load) of every SGLang scheduler group at every sample time it reported running
    requests (`sglang_group_values`)."""
    names = trigger.sglang
    running = sglang_group_values(samples, names.running)
    used = sglang_group_values(samples, names.kv_tokens_used)
    return [
        (when, InstanceLoad("sglang", key, value, used.get((when, key))))
        for (when, key), value in sorted(running.items())
    ]


def vllm_loads(trigger: SessionLoadTrigger, samples: list[Sample]) -> list[tuple[float, InstanceLoad]]:
    """(time, load) of every vLLM engine at every sample time it reported running requests; its
    KV tokens are the used fraction times the cache's size (`cache_tokens`, from the labels of
    the info gauge of the same engine index on the same node: each node's scrape is labelled
    with its `instance`; that gauge carries no model name)."""
    names = trigger.vllm
    running = _by_instance(samples, names.running)
    usage = _by_instance(samples, names.kv_usage_fraction)
    capacity: dict[tuple[str, str], float] = {}  # (node, engine index) -> tokens
    for s in samples:
        if s.metric != names.cache_info:
            continue
        size = cache_tokens(s.labels)
        if size is not None:
            capacity[(s.labels.get(_INSTANCE, ""), s.labels.get("engine", ""))] = size
    loads: list[tuple[float, InstanceLoad]] = []
    for (when, key), value in sorted(running.items()):
        fraction = usage.get((when, key))
        size = capacity.get((key_label(key, _INSTANCE), key_label(key, "engine")))
        if size is None and len(capacity) == 1:  # one engine (older vLLM labels neither series)
            size = next(iter(capacity.values()))
        kv = fraction * size if fraction is not None and size is not None else None
        loads.append((when, InstanceLoad("vllm", key, value, kv)))
    return loads


def cache_tokens(labels: dict[str, str]) -> float | None:
    """KV-cache size in tokens from vLLM's cache info labels; None when not (yet) known.

    vLLM builds that set `kv_cache_size_tokens` (vllm/v1/core/kv_cache_utils.py
    `update_kv_cache_capacity`, a CacheConfig field that cache_config_info exports with the
    others) count the capacity over every KV-cache group; with hybrid attention the groups
    differ and `num_gpu_blocks` x `block_size` (the smallest group's block) is many times
    too small (vllm-project/vllm#51163: 20,377 x 4 against 1,179,770). That label wins;
    blocks x block size is for builds without it.
    """
    size = labels.get("kv_cache_size_tokens", "")
    if _count(size):
        return float(int(size))
    blocks, block_size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
    if not (_count(blocks) and _count(block_size)):
        return None
    return float(int(blocks) * int(block_size))


def _count(text: str) -> bool:
    """`text` is a whole number a cache could hold (ASCII digits, at most 15 of them; vLLM
    writes `None` for a size not yet profiled)."""
    return 0 < len(text) <= 15 and text.isascii() and text.isdigit()


#: how many instance names one evidence line lists
_FEW = 4


def _few(names: list[str]) -> str:
    """At most `_FEW` names, then how many more (a hostile scrape can hold thousands)."""
    more = f"; and {len(names) - _FEW} more" if len(names) > _FEW else ""
    return "; ".join(names[:_FEW]) + more


@dataclass(frozen=True)
class Grid:
    """The sample times a window was read at: every `step` seconds from `start` to `end`
    (a Prometheus range query's). Without one, the times are what the scrapes hold."""

    start: float
    end: float
    step: float

    @property
    def steps(self) -> int:
        """How many sample times the window holds (both ends included)."""
        return int((self.end - self.start) // self.step) + 1


def _median_gap(times: list[float]) -> float:
    gaps = sorted(later - earlier for earlier, later in itertools.pairwise(times))
    return gaps[len(gaps) // 2]


def _base(trigger: SessionLoadTrigger) -> dict[str, str]:
    return {"id": trigger.id, "kind": trigger.kind, "description": trigger.description,
            "reopens": trigger.reopens}


def evaluate_session_load(
    trigger: SessionLoadTrigger, samples: list[Sample], grid: Grid | None = None
) -> TriggerVerdict:
    """Fires when more than `more_than` long sessions ran at once for at least
    `sustained_fraction` of the window: of the sample times of `grid` (Prometheus history),
    else of the times a window of saved scrapes ending at the latest one holds at their usual
    spacing. A time with no reading counts for neither side: the verdict is unknown when it
    could tip it. One scrape is a snapshot, never a sustained load: unknown. Long sessions at
    a time are summed over engine instances (see `InstanceLoad.long_sessions`)."""
    loads = sglang_loads(trigger, samples) + vllm_loads(trigger, samples)
    judged = [(t, load) for t, load in loads if load.long_sessions(trigger.min_context_tokens) is not None]
    blind = sorted({load.name for _, load in loads} - {load.name for _, load in judged})
    blind_note = [f"no usable running or KV-cache reading for {_few(blind)}: not counted"] if blind else []
    if grid is not None:
        start, latest = grid.start, grid.end
        judged = [(t, load) for t, load in judged if start <= t <= latest]
    if not judged:
        wanted = f"{trigger.sglang.running} or {trigger.vllm.running}"
        where = "in the window" if grid is not None else "in the metrics"
        return TriggerVerdict(
            status=UNKNOWN,
            evidence=[f"no {wanted} samples with KV-cache usage {where}", *blind_note],
            **_base(trigger),
        )
    if grid is None:
        latest = max(t for t, _ in judged)
        start = latest - trigger.window_minutes * 60
    times = sorted({t for t, _ in judged if t >= start})
    counts = {t: 0 for t in times}
    for t, load in judged:
        if t >= start:
            counts[t] += load.long_sessions(trigger.min_context_tokens) or 0
    over = [t for t in times if counts[t] > trigger.more_than]
    engines = sorted({load.name for _, load in judged})
    sessions = f"more than {trigger.more_than} sessions of ≥{trigger.min_context_tokens} tokens"
    load_lines = [
        f"peak concurrency {max(counts.values())}, median {sorted(counts.values())[len(counts) // 2]}",
        f"engine instances read: {_few(engines)}",
        *blind_note,
        f"a session counts per engine instance as min(running requests, KV-cache tokens in use / "
        f"{trigger.min_context_tokens}) (the trigger's definition in baselines/site.yaml)",
        *threshold_sources(trigger),
    ]
    if grid is None and len(times) == 1:
        return TriggerVerdict(
            status=UNKNOWN,
            evidence=[
                f"snapshot, not sustained: 1 sample time in the {trigger.window_minutes}-minute window "
                f"({'one with' if over else 'none with'} {sessions}); whether a load lasted for "
                f"≥{trigger.sustained_fraction:.0%} of the window is judged over history "
                "(--prometheus URL, or saved scrapes over the window)",
                *load_lines,
            ],
            **_base(trigger),
        )
    expected = grid.steps if grid is not None else max(
        len(times), int(trigger.window_minutes * 60 // _median_gap(times)) + 1)
    unread = expected - len(times)
    least, most = len(over) / expected, (len(over) + unread) / expected
    fraction = trigger.sustained_fraction
    status = FIRED if least >= fraction else QUIET if most < fraction else UNKNOWN
    read = f"{len(times)} sample time(s)" if grid is None else f"{len(times)} of {expected} steps"
    evidence = [
        f"{read} in the {trigger.window_minutes}-minute window; {len(over)} with {sessions} "
        f"({least:.0%} of the window; fires at ≥{trigger.sustained_fraction:.0%})",
        *load_lines,
    ]
    if unread:
        judged_as = {FIRED: "the load read already fires", QUIET: "too few to fire even if all were over",
                     UNKNOWN: "could tip the verdict: not judged"}[status]
        evidence.insert(1, f"no reading at {unread} of {expected} sample times of the window; {judged_as}")
    return TriggerVerdict(status=status, evidence=evidence, **_base(trigger))


def threshold_sources(trigger: SessionLoadTrigger) -> list[str]:
    """One line naming where the window and the fraction come from (the site's to decide)."""
    names: tuple[SessionLoadField, ...] = ("window_minutes", "sustained_fraction")
    parts = []
    for name in names:
        source = trigger.sources.get(name)
        said = "no source" if source is None else describe(source)
        if source is not None and source.note:
            said += f" ({source.note})"
        parts.append(f"{name} {getattr(trigger, name)}: {said}")
    return ["; ".join(parts)]


def site_driver_pins(site: Site) -> dict[str, list[str]]:
    """The driver versions the baselines of the inventory's nodes pin -> those nodes."""
    pins: dict[str, list[str]] = {}
    for node in sorted(site.inventory.nodes):
        pins.setdefault(site.baseline_of(node).driver.version, []).append(node)
    return pins


def _driver_moved(trigger: KernelPinTrigger, site: Site) -> tuple[bool, list[str]]:
    """Whether the site's driver pin is no longer the trigger's, and the evidence line."""
    if trigger.driver_pin is None:
        return False, []
    pins = site_driver_pins(site)
    shown = "; ".join(f"{version} ({', '.join(nodes)})" for version, nodes in sorted(pins.items()))
    moved = bool(pins) and set(pins) != {trigger.driver_pin}
    verdict = "moved" if moved else "unchanged"
    return moved, [f"site driver pin: {shown or 'no node in the inventory'} "
                   f"(trigger: a move from {trigger.driver_pin}; {verdict})"]


def evaluate_kernel_pin(
    trigger: KernelPinTrigger, site: Site, live: Mapping[str, tuple[str | None, int | None]] | None = None
) -> TriggerVerdict:
    """Fires when the site contract's kernel line and page size are the trigger's, or when
    the driver the inventory's baselines pin is no longer the trigger's `driver_pin`."""
    contract = site.rules.contract
    line_matches = (contract.kernel_line + ".").startswith(trigger.kernel_line_prefix)
    kernel_moved = line_matches and contract.page_size == trigger.page_size
    driver_moved, driver_lines = _driver_moved(trigger, site)
    evidence = [
        f"site contract: kernel line {contract.kernel_line}, page size {contract.page_size} "
        f"(trigger: {trigger.kernel_line_prefix}x with {trigger.page_size})",
        *driver_lines,
    ]
    if live is not None:
        for node, (release, page) in sorted(live.items()):
            evidence.append(f"{node}: running {release or 'unknown'}, page size {page or 'unknown'}")
    return TriggerVerdict(
        id=trigger.id,
        kind=trigger.kind,
        status=FIRED if kernel_moved or driver_moved else QUIET,
        description=trigger.description,
        reopens=trigger.reopens,
        evidence=evidence,
    )


@dataclass(frozen=True)
class MetricsSource:
    """Where the session-load evidence came from, for the verdict: `lines` say which source
    was read; `missing` names what could not be read (a lane node whose endpoint failed):
    the samples are then a part of the load, enough to fire but never to call it quiet."""

    lines: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class History:
    """A session-load trigger's window as the site's Prometheus holds it: the samples at every
    step of `grid`, and the lines saying where they came from."""

    samples: list[Sample]
    grid: Grid
    lines: tuple[str, ...] = ()


def evaluate(
    site: Site,
    samples: list[Sample] | None,
    live: Mapping[str, tuple[str | None, int | None]] | None = None,
    source: MetricsSource | None = None,
    history: Mapping[str, History] | None = None,
) -> list[TriggerVerdict]:
    """Every trigger of the site (pure, given the evidence). A session-load trigger whose id
    `history` holds is judged over that history, the others over `samples`."""
    verdicts: list[TriggerVerdict] = []
    for trigger in site.rules.triggers:
        if trigger.kind == "kernel-pin":
            verdicts.append(evaluate_kernel_pin(trigger, site, live))
        elif history is not None and trigger.id in history:
            held = history[trigger.id]
            verdicts.append(_with_source(evaluate_session_load(trigger, held.samples, held.grid),
                                         MetricsSource(lines=held.lines)))
        elif samples is None:
            verdicts.append(
                TriggerVerdict(
                    trigger.id,
                    trigger.kind,
                    UNKNOWN,
                    trigger.description,
                    trigger.reopens,
                    ["no metrics given (--prometheus URL for history, --metrics URL_OR_FILE for scrapes)",
                     *(source.lines if source else ())],
                )
            )
        else:
            verdicts.append(_with_source(evaluate_session_load(trigger, samples), source))
    return verdicts


def _with_source(verdict: TriggerVerdict, source: MetricsSource | None) -> TriggerVerdict:
    """The verdict with its source stated last (the judgement's lines keep their places);
    quiet becomes unknown when part is missing
    (an unread node's sessions could be the ones over the line; fired stays fired)."""
    if source is None:
        return verdict
    status = verdict.status
    notes: list[str] = []
    if source.missing:
        if status == QUIET:
            status = UNKNOWN
        judged = "the load seen already fires" if status == FIRED else "quiet cannot be judged on a part"
        notes.append(f"not read: {_few(list(source.missing))}; {judged}")
    return TriggerVerdict(verdict.id, verdict.kind, status, verdict.description, verdict.reopens,
                          [*verdict.evidence, *notes, *source.lines])


def exit_status(verdicts: list[TriggerVerdict]) -> int:
    """Fired wins; otherwise an unjudged trigger is distinct from a quiet one."""
    if any(v.fired for v in verdicts):
        return EXIT_FIRED
    if any(v.status == UNKNOWN for v in verdicts):
        return EXIT_UNKNOWN
    return EXIT_QUIET


def now() -> float:
    """The current Unix time (the scrape time of an untimestamped URL scrape)."""
    return time.time()
