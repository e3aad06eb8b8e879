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

from sparkbase.deploy.operations import noop, noop_reasons


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
    assert {"_if", "_sudo"} <= names


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
