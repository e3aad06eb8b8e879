"""The pyinfra API the deploy stands on (deploy/session.py) is there, as documented for 3.x.

sparkbase uses no private pyinfra name; this test fails when a documented one it relies on
moves or changes shape, so an upgrade breaks here and not on a node.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import gevent
from pyinfra.api.arguments import all_global_arguments
from pyinfra.api.host import Host
from pyinfra.api.operation import OperationMeta
from pyinfra.api.state import BaseStateCallback, State, StateOperationHostData
from pyinfra.context import ctx_host

from sparkbase.deploy.operations.base import noop, noop_reasons


def parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_the_state_callbacks_the_session_overrides_keep_their_signatures() -> None:
    assert parameters(BaseStateCallback.host_connect) == ["state", "host"]
    assert parameters(BaseStateCallback.operation_host_start) == ["state", "host", "op_hash"]
    assert parameters(BaseStateCallback.operation_host_error)[:3] == ["state", "host", "op_hash"]


def test_the_state_and_host_methods_the_session_calls_exist() -> None:
    assert parameters(State.get_op_data_for_host) == ["self", "host", "op_hash"]
    assert parameters(State.add_callback_handler) == ["self", "handler"]
    assert "operation_meta" in {f.name for f in dataclasses.fields(StateOperationHostData)}
    for name in ("run_shell_command", "get_fact", "noop"):
        assert callable(getattr(Host, name))


def test_operation_meta_answers_what_the_results_ask() -> None:
    meta = OperationMeta("hash", is_change=True)
    assert meta.will_change is True and meta.is_complete() is False
    for name in ("did_change", "did_error"):
        assert callable(getattr(meta, name))


def test_the_global_arguments_set_as_host_data_exist() -> None:
    names = {name for name, _type in all_global_arguments()}
    assert {"_if", "_sudo", "_timeout", "_stdin", "_ignore_errors"} <= names


class FakeHost:
    """Just what `noop` needs of pyinfra's host: a name and `noop`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.logged: list[str] = []

    def noop(self, description: str) -> None:
        self.logged.append(description)


def test_noop_reasons_are_collected_per_block_and_per_greenlet() -> None:
    def add(name: str, reasons_said: list[str]) -> list[str]:
        with ctx_host.use(FakeHost(name)), noop_reasons() as reasons:
            for reason in reasons_said:
                noop(reason)
                gevent.sleep(0.001)  # let the other host's greenlet run in between
        return reasons

    one = gevent.spawn(add, "spark1", ["already there", "kept"])
    two = gevent.spawn(add, "spark2", ["nothing to do"])
    gevent.joinall([one, two])
    assert one.get() == ["already there", "kept"]
    assert two.get() == ["nothing to do"]
    with ctx_host.use(FakeHost("spark3")):
        noop("outside any block")  # logged only (the pyinfra CLI's native deploy)


class StubState:
    """pyinfra's `get_op_data_for_host` over a plain table: host -> op hash -> data."""

    def __init__(self, ops: dict[str, dict[str, Any]]) -> None:
        self.ops = ops

    def get_op_data_for_host(self, host: Any, op_hash: str) -> Any:
        return self.ops[host.name][op_hash]


def test_callbacks_for_a_host_without_the_operation_say_nothing() -> None:
    """pyinfra numbers operations per host and calls back for every active host, also one
    whose baseline has fewer steps: its progress and failures must not break the run."""
    from types import SimpleNamespace

    from sparkbase.deploy.areas.files import File
    from sparkbase.deploy.kinds import Step
    from sparkbase.deploy.pyinfra_deploy import AddedOp
    from sparkbase.deploy.session import Prepared, Session, _callbacks

    meta = OperationMeta("h1", is_change=True)
    step = Step(File(path="/etc/nccl.conf", content="", mode=0o644), "file /etc/nccl.conf", section="nccl")
    said: list[str] = []
    session = Session.__new__(Session)
    session.state = StubState({"spark1": {"h1": SimpleNamespace(operation_meta=meta)}, "spark2": {}})  # type: ignore[assignment]
    session.host = lambda node: SimpleNamespace(name=node)  # type: ignore[method-assign]
    session.prepared = {"spark1": Prepared([AddedOp(step, meta)], {}, {}), "spark2": Prepared([], {}, {})}
    session.executing = {"spark1", "spark2"}
    session.errors = {}
    session.options = SimpleNamespace(progress=said.append)  # type: ignore[assignment]
    callbacks = _callbacks(session)
    for node in ("spark1", "spark2"):
        callbacks.operation_host_start(None, SimpleNamespace(name=node), "h1")
    assert said == ["spark1: file /etc/nccl.conf"]
    callbacks.operation_host_error(None, SimpleNamespace(name="spark1"), "h1")
    assert session.errors["spark1"].message == "operation failed: file /etc/nccl.conf"
    assert session.errors["spark1"].kind == "command"
