"""The per-prepare fact memo: inside `fact_scope` a fact is read once (most of them in one
batch) and every ask gets its own copy; outside it, `fact` is `host.get_fact`; scopes never
cross greenlets (pyinfra prepares hosts in parallel ones) nor outlive their block."""

from __future__ import annotations

import contextvars
from itertools import count
from typing import Any

import gevent
import pytest
from pyinfra.api.facts import FactBase
from pyinfra.context import ctx_host

from sparkbase.deploy.fact_batch import Ask, BatchAnswer, FactBatch
from sparkbase.deploy.fact_memo import fact, fact_scope


class Packages(FactBase[Any]):
    def command(self) -> str:
        return "dpkg -l"


class FileAt(FactBase[Any]):
    def command(self, path: str, follow: bool = False) -> str:
        return f"cat {path}"


class Guarded(FactBase[Any]):
    def command(self) -> str:
        return "true"

    def check_preconditions(self, state: Any, host: Any) -> str | None:
        return None


class FakeHost:
    """What the memo needs of pyinfra's host: a name and `get_fact`, which here records each
    call (each one a round trip on a real host) and answers a fresh value every time."""

    def __init__(self, name: str, unanswerable: tuple[type[FactBase[Any]], ...] = ()) -> None:
        self.name = name
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.unanswerable = unanswerable
        self.counter = count()

    def value(self, cls: type[FactBase[Any]], kwargs: dict[str, Any]) -> dict[str, Any]:
        return {"host": self.name, "fact": cls.__name__, **kwargs, "read": next(self.counter)}

    def get_fact(self, cls: type[FactBase[Any]], **kwargs: Any) -> Any:
        self.calls.append((cls.__name__, kwargs))
        if cls is not FactBatch:
            return self.value(cls, kwargs)
        found = BatchAnswer()
        for ask in kwargs["asks"]:
            if ask.cls in self.unanswerable:
                found.unanswered[ask.key()] = "exit status 1"
            else:
                found.values[ask.key()] = self.value(ask.cls, dict(ask.kwargs))
        return found

    def round_trips(self) -> list[str]:
        return [name for name, _ in self.calls]


def test_outside_a_scope_every_ask_is_a_round_trip() -> None:
    host = FakeHost("spark1")
    with ctx_host.use(host):
        first, second = fact(Packages), fact(Packages)
    assert host.round_trips() == ["FactBatch", "FactBatch"]  # each a bounded batch of one
    assert first["read"] != second["read"]


def test_inside_a_scope_the_prefetched_facts_come_in_one_batch_and_each_fact_is_read_once() -> None:
    host = FakeHost("spark1")
    prefetch = [Ask.of(Packages), Ask.of(FileAt, path="/a"), Ask.of(Packages), Ask.of(Guarded)]
    with ctx_host.use(host), fact_scope(prefetch) as stats:
        answers = [fact(Packages), fact(Packages), fact(FileAt, path="/a"), fact(FileAt, path="/b"),
                   fact(FileAt, path="/b"), fact(Guarded)]
    batch_call = host.calls[0]
    assert batch_call[1]["_ignore_errors"] is True  # a failed batch never fails the host itself
    # the repeated ask once, and the fact pyinfra runs with preconditions never in a batch
    assert batch_call[1]["asks"] == [Ask.of(Packages), Ask.of(FileAt, path="/a")]
    assert host.round_trips() == ["FactBatch", "FactBatch", "Guarded"]
    assert answers[0] == answers[1] and answers[2]["path"] == "/a" and answers[3] == answers[4]
    assert (stats.batches, stats.prefetched, stats.served) == (1, 2, 4)
    assert stats.fetched == ["FileAt(path='/b')", "Guarded()"]
    assert stats.unused == []


def test_keys_are_the_fact_and_its_arguments_whatever_their_order() -> None:
    host = FakeHost("spark1")
    with ctx_host.use(host), fact_scope():
        one = fact(FileAt, path="/a", follow=True)
        same = fact(FileAt, follow=True, path="/a")
        other = fact(FileAt, path="/a", follow=False)
    assert one == same != other
    assert host.round_trips() == ["FactBatch", "FactBatch"]


def test_every_ask_gets_its_own_copy() -> None:
    host = FakeHost("spark1")
    with ctx_host.use(host), fact_scope([Ask.of(Packages)]):
        first = fact(Packages)
        first["fact"] = "changed by a caller"
        assert fact(Packages)["fact"] == "Packages"


def test_once_the_scope_ends_every_ask_is_a_round_trip_again() -> None:
    host = FakeHost("spark1")
    with ctx_host.use(host):
        with fact_scope([Ask.of(Packages)]) as stats:
            inside = fact(Packages)
            leaked = contextvars.copy_context()  # a context copied while the scope was open
        after = fact(Packages)
        from_copy = leaked.run(fact, Packages)
    assert host.round_trips() == ["FactBatch", "FactBatch", "FactBatch"]
    assert inside["read"] != after["read"] != from_copy["read"]
    assert stats.served == 1


def test_asks_with_pyinfra_global_arguments_are_never_memoised() -> None:
    host = FakeHost("spark1")
    with ctx_host.use(host), fact_scope([Ask.of(Packages)]):
        fact(Packages, _sudo=True)
        fact(Packages, _sudo=True)
    assert host.round_trips() == ["FactBatch", "Packages", "Packages"]


def test_a_fact_the_batch_could_not_answer_is_read_on_its_own_then_kept() -> None:
    host = FakeHost("spark1", unanswerable=(FileAt,))
    with ctx_host.use(host), fact_scope([Ask.of(Packages), Ask.of(FileAt, path="/a")]) as stats:
        fact(FileAt, path="/a")
        fact(FileAt, path="/a")
    assert host.round_trips() == ["FactBatch", "FactBatch", "FileAt"]  # pyinfra's own read decides
    assert stats.unanswered == {"FileAt(path='/a')": "exit status 1"}
    assert stats.unused == ["Packages()"]


def test_a_batch_that_failed_whole_leaves_every_fact_to_its_own_round_trip() -> None:
    host = FakeHost("spark1")

    def get_fact(cls: type[Any], **kw: Any) -> Any:
        host.calls.append((cls.__name__, kw))
        return BatchAnswer() if cls is FactBatch else {"read": cls.__name__}

    host.get_fact = get_fact  # type: ignore[method-assign]
    with ctx_host.use(host), fact_scope([Ask.of(Packages)]) as stats:
        assert fact(Packages) == {"read": "Packages"}
    assert host.round_trips() == ["FactBatch", "FactBatch", "Packages"]
    assert stats.unanswered == {"Packages()": "batch failed"}


def test_a_scope_serves_only_its_own_host() -> None:
    spark1, spark2 = FakeHost("spark1"), FakeHost("spark2")
    with ctx_host.use(spark1), fact_scope([Ask.of(Packages)]), ctx_host.use(spark2):
        assert fact(Packages)["host"] == "spark2"
    assert spark2.round_trips() == ["FactBatch"]


def test_scopes_in_parallel_greenlets_never_meet() -> None:
    def prepare(host: FakeHost, scoped: bool) -> list[str]:
        seen = []
        with ctx_host.use(host):
            scope = fact_scope([Ask.of(Packages)]) if scoped else None
            if scope is not None:
                scope.__enter__()
            for _ in range(3):
                seen.append(fact(Packages)["host"])
                gevent.sleep(0.001)  # let the other hosts' greenlets run in between
            if scope is not None:
                scope.__exit__(None, None, None)
        return seen

    hosts = [FakeHost("spark1"), FakeHost("spark2"), FakeHost("spark3")]
    greenlets = [gevent.spawn(prepare, host, host.name != "spark3") for host in hosts]
    gevent.joinall(greenlets)
    assert [g.get() for g in greenlets] == [["spark1"] * 3, ["spark2"] * 3, ["spark3"] * 3]
    assert hosts[0].round_trips() == hosts[1].round_trips() == ["FactBatch"]
    assert hosts[2].round_trips() == ["FactBatch"] * 3  # no scope of its own: no memo


@pytest.mark.parametrize("nodes", [1, 4])
def test_unused_counts_only_what_was_read_and_never_asked(nodes: int) -> None:
    host = FakeHost("spark1")
    asks = [Ask.of(FileAt, path=f"/f{n}") for n in range(nodes)]
    with ctx_host.use(host), fact_scope(asks) as stats:
        fact(FileAt, path="/f0")
    assert stats.unused == [f"FileAt(path='/f{n}')" for n in range(1, nodes)]


def test_an_ask_whose_command_cannot_be_built_is_left_to_the_operations_own_ask() -> None:
    host = FakeHost("spark1")
    wrong = Ask.of(FileAt, no_such_argument="/a")
    with ctx_host.use(host), fact_scope([wrong, Ask.of(Packages)]) as stats:
        fact(Packages)
    assert host.calls[0][1]["asks"] == [Ask.of(Packages)]
    assert stats.unanswered == {"FileAt(no_such_argument='/a')": "command raised TypeError"}

