"""A per-prepare fact memo: while a host's operations are *added* (planned), every fact is
read from the node at most once, most of them in one batched round trip.

pyinfra 3.10 keeps no fact cache: each `host.get_fact` is its own SSH round trip, and the
deploy asks the same facts again and again (the package list, the ownership record, ...).
An operation's body runs when the operation is added, against the node as it is before
anything executes, so within that phase a fact's answer cannot change; `fact_scope` opens
a memo for exactly that phase and `fact` (what sparkbase's operations and session call
instead of `host.get_fact`) answers from it.

- Inside a scope, `fact(cls, **kwargs)` answers from the memo, keyed by (host name, fact
  class, kwargs); an answer not there yet is fetched by `host.get_fact` and kept. Each call
  gets its own copy (a caller that changes its answer never changes another's).
- Outside a scope, or once it closed, `fact` is `host.get_fact`, exactly as before.
- The scope is a ContextVar, as `operations.noop_reasons`: pyinfra prepares hosts in
  parallel greenlets, each with its own context.
- `fact_scope(prefetch)` first reads the facts it is told the host will be asked, in one
  round trip (`fact_batch.FactBatch`; several when the script would be too long). What the
  batch could not answer as pyinfra would is left out, and fetched on its own when asked.
- Every read of a plain fact, in a scope or not, is a batch (of one when it is not
  prefetched): bounded in size, its fences secret, bytes that are not UTF-8 escaped; only
  what a batch cannot answer as pyinfra would is then asked through `host.get_fact`. A
  batch whose answer is refused (no answer in time, output without end, forged sections)
  raises `FactReadFailed`: the node fails with that reason.

Never open a scope across anything that runs commands on the node (the execute phase, a
reboot, a re-plan after one): the runner opens it around one host's prepare only
(`deploy/session.py`), and the native deploy around its `add_steps` (`cli/native.py`).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Hashable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pyinfra.api.facts import FactBase
from pyinfra.context import host

from sparkbase.deploy.fact_batch import (
    NO_ANSWER,
    Ask,
    BatchAnswer,
    FactBatch,
    FactReadFailed,
    chunks,
    plan_ask,
)
from sparkbase.facts.script import marker_stdin, new_marker
from sparkbase.transport.failure import FailureKind, failure

__all__ = ["Ask", "FactReadFailed", "MemoStats", "fact", "fact_scope", "read_batch"]

T = TypeVar("T")


@dataclass
class MemoStats:
    """How a scope's facts were read: batch round trips, asks answered by a batch, asks
    fetched one by one (not prefetched, or not answerable in the batch), asks served from
    the memo, and the prefetched asks nobody asked (a wasted read)."""

    batches: int = 0
    prefetched: int = 0
    fetched: list[str] = field(default_factory=list)
    served: int = 0
    unanswered: dict[str, str] = field(default_factory=dict)
    unused: list[str] = field(default_factory=list)


@dataclass
class _Memo:
    host: str
    values: dict[Hashable, Any] = field(default_factory=dict)
    asked: set[Hashable] = field(default_factory=set)
    names: dict[Hashable, str] = field(default_factory=dict)
    stats: MemoStats = field(default_factory=MemoStats)
    open: bool = True


_MEMO: ContextVar[_Memo | None] = ContextVar("sparkbase_fact_memo", default=None)


def _describe(ask: Ask) -> str:
    args = ", ".join(f"{key}={value!r}" for key, value in ask.kwargs)
    return f"{ask.cls.__name__}({args})"


def _key(name: str, ask: Ask) -> Hashable:
    return (name, *ask.key())


def _prefetch(memo: _Memo, asks: Iterable[Ask]) -> None:
    """Read `asks` (once each, the batchable ones) in as few round trips as fit."""
    todo: dict[Hashable, Ask] = {}
    for ask in asks:
        key = _key(memo.host, ask)
        if not ask.batchable() or key in memo.values or key in todo:
            continue
        try:
            plan_ask(ask)
        except Exception as exc:  # a wrong ask never breaks the prepare: the op's own ask decides
            memo.stats.unanswered[_describe(ask)] = f"command raised {type(exc).__name__}"
            continue
        todo[key] = ask
    for batch in chunks(list(todo.values())):
        found = read_batch(batch)
        memo.stats.batches += 1
        for ask in batch:
            key = _key(memo.host, ask)
            memo.names[key] = _describe(ask)
            if ask.key() in found.values:
                memo.values[key] = found.values[ask.key()]
                memo.stats.prefetched += 1
            else:
                memo.stats.unanswered[_describe(ask)] = found.unanswered.get(ask.key(), "batch failed")


def read_batch(asks: list[Ask]) -> BatchAnswer:
    """`asks` read from the current host in one bounded round trip (`FactBatch`: the marker
    on stdin, pyinfra's `_timeout` from the host data); `FactReadFailed` when the answer is
    refused or none came (no answer within the command timeout, output without end)."""
    marker = new_marker()
    data = getattr(host, "data", None)
    given = getattr(data, "sparkbase_command_timeout", None) or getattr(data, "_timeout", None)
    timeout = math.ceil(float(given)) if given is not None else None  # pyinfra takes whole seconds
    started = time.monotonic()
    found = host.get_fact(FactBatch, asks=asks, fence=marker, _stdin=marker_stdin(marker),
                          _ignore_errors=True, **({"_timeout": timeout} if timeout is not None else {}))
    if found.failure is None:
        return found
    reason = found.failure
    if reason is NO_ANSWER and timeout is not None and time.monotonic() - started >= timeout - 0.5:
        reason = failure(FailureKind.TIMEOUT, f"no answer to a fact read within {timeout}s "
                                              "(ssh.command_timeout)")
    raise FactReadFailed(reason)


@contextmanager
def fact_scope(prefetch: Iterable[Ask] = ()) -> Iterator[MemoStats]:
    """Memoise the current host's facts inside the block (read `prefetch` first, batched);
    yields the scope's statistics, complete once the block ends."""
    memo = _Memo(host.name)
    token = _MEMO.set(memo)
    try:
        _prefetch(memo, prefetch)
        yield memo.stats
    finally:
        memo.open = False
        _MEMO.reset(token)
        memo.stats.unused = sorted(name for key, name in memo.names.items()
                                   if key in memo.values and key not in memo.asked)


def fact(cls: type[FactBase[T]], **kwargs: Any) -> T:
    """`host.get_fact(cls, **kwargs)` for the current host, memoised inside `fact_scope`."""
    memo = _MEMO.get()
    if memo is None or not memo.open or memo.host != host.name or any(k.startswith("_") for k in kwargs):
        # outside a prepare, or with pyinfra global arguments (which change how it runs)
        return _read(cls, kwargs)
    ask = Ask.of(cls, **kwargs)
    key = _key(memo.host, ask)
    if key in memo.values:
        memo.stats.served += 1
    else:
        memo.values[key] = _read(cls, kwargs)
        memo.stats.fetched.append(_describe(ask))
    memo.asked.add(key)
    found: T = copy.deepcopy(memo.values[key])
    return found


def _read(cls: type[FactBase[T]], kwargs: dict[str, Any]) -> T:
    """One fact read from the current host: through a batch of one (bounded, fenced) when
    pyinfra runs it as a plain command, else (and when the batch cannot answer it as
    pyinfra would) by `host.get_fact`."""
    ask = Ask.of(cls, **kwargs)
    if ask.batchable() and not any(key.startswith("_") for key in kwargs):
        found = read_batch([ask])
        if ask.key() in found.values:
            value: T = found.values[ask.key()]
            return value
    return host.get_fact(cls, **kwargs)
