"""`FactBatch`: many facts' commands in one round trip, each answered as pyinfra's own
`get_fact` answers it, or not at all (then fetched on its own).

Two kinds of test: `process` against recorded answers (pure, a fixed marker), and the batch
against pyinfra itself on its `@local` host (`sh` on this machine, harmless `printf`s):
every fact asked in one batch must read exactly what `host.get_fact` reads alone.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from pyinfra.api.config import Config
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import FactProcessError
from pyinfra.api.facts import FactBase
from pyinfra.api.inventory import Inventory
from pyinfra.api.state import State
from pyinfra.context import ctx_host, ctx_state

from sparkbase.deploy.fact_batch import (
    MAX_SCRIPT_BYTES,
    Ask,
    FactBatch,
    answer,
    chunks,
    stdout_lines,
)
from sparkbase.deploy.fact_memo import fact, fact_scope, read_batch
from sparkbase.facts.script import Section

DEFAULT = "DEFAULT"
MARKER = "@@sparkbase-facts-0123456789abcdef@@"


class Shell(FactBase[Any]):
    """Runs the shell text it is given; answers its stdout lines."""

    def command(self, script: str) -> str:
        return script

    @staticmethod
    def default() -> Any:
        return DEFAULT

    def process(self, output: list[str]) -> Any:
        return output


class Remembers(FactBase[Any]):
    """Keeps its argument on the instance in `command` and reads it back in `process`."""

    def command(self, word: str) -> str:
        self.word = word
        return f"echo {word}"

    def process(self, output: list[str]) -> Any:
        return (self.word, output)


class NeedsTool(FactBase[Any]):
    """Needs a binary no machine has."""

    def command(self) -> str:
        return "echo never"

    def requires_command(self) -> str:
        return "sparkbase-no-such-tool"

    @staticmethod
    def default() -> Any:
        return {"missing": True}


class RaisesValue(FactBase[Any]):
    def command(self) -> str:
        return "echo boom"

    def process(self, output: list[str]) -> Any:
        raise ValueError("cannot read " + output[0])


class RaisesProcessError(FactBase[Any]):
    def command(self) -> str:
        return "echo boom"

    def process(self, output: list[str]) -> Any:
        raise FactProcessError("cannot read " + output[0])


class Guarded(FactBase[Any]):
    def command(self) -> str:
        return "true"

    def check_preconditions(self, state: Any, host: Any) -> str | None:
        return None


class OwnShell(FactBase[Any]):
    shell_executable = "bash"

    def command(self) -> str:
        return "true"


#: (case, shell text): pyinfra answers each with status 0; the batch must read them the same,
#: in this order (a `cd`, variables, functions and `exit` must not leak into the next section)
ANSWERED = [
    ("trailing newline", r"printf 'a\nb\n'"),
    ("no final newline", r"printf 'a\nb'"),
    ("carriage returns", r"printf 'a\r\nb\r\n'"),
    ("empty lines", r"printf '\n\na\n\n'"),
    ("one empty line", r"printf '\n'"),
    ("no output", "true"),
    ("stderr kept out", "echo out; echo err >&2"),
    ("stdin closed", "cat"),
    ("utf-8", r"printf 'caf\303\251\n'"),
    ("changes directory", "cd / && pwd"),
    ("directory unchanged", "pwd"),
    ("overwrites the fences", "_sparkbase_m=forged; _sparkbase_e() { :; }; b() { :; }; echo x"),
    ("sees no batch", 'echo "m=[$_sparkbase_m]"; command -v _sparkbase_b || echo none'),
    ("exits early", "echo early; exit 0; echo late"),
    ("prints fence lookalikes",
     f"printf '%s\\n' '{MARKER} END 9 0' '@@sparkbase-facts-x@@ BEGIN 1' '{MARKER}'"),
    ("a comment", "echo before # ) ; echo not run"),
    ("pipes and quotes", "printf '%s\\n' \"it's\" | tr a-z A-Z"),
]


@pytest.fixture(scope="module")
def local() -> Iterator[tuple[State, Any]]:
    """pyinfra's `@local` host, connected, in context."""
    inventory = Inventory((["@local"], {}))  # type: ignore[no-untyped-call]
    state = State(inventory, Config())  # type: ignore[no-untyped-call]
    connect_all(state)
    host = inventory.get_host("@local")
    with ctx_state.use(state), ctx_host.use(host):
        yield state, host


def test_every_answer_in_one_batch_is_what_pyinfra_reads_alone(local: tuple[State, Any]) -> None:
    _, host = local
    asks = [Ask.of(Shell, script=text) for _, text in ANSWERED]
    batch = read_batch(asks)
    assert batch.unanswered == {}
    for (case, text), ask in zip(ANSWERED, asks, strict=True):
        alone = host.get_fact(Shell, script=text)
        assert batch.values[ask.key()] == alone, case
    # and what that is, spelled out for the cases whose reading is easy to get wrong
    said = {case: batch.values[ask.key()] for (case, _), ask in zip(ANSWERED, asks, strict=True)}
    assert said["no final newline"] == ["a", "b"]
    assert said["carriage returns"] == ["a\r", "b\r"]
    assert said["empty lines"] == ["", "", "a", ""]
    assert said["one empty line"] == [""]
    assert said["no output"] == said["stdin closed"] == DEFAULT
    assert said["stderr kept out"] == ["out"]
    assert said["changes directory"] == ["/"] and said["directory unchanged"] != ["/"]
    assert said["overwrites the fences"] == ["x"]
    assert said["sees no batch"] == ["m=[]", "none"]
    assert said["prints fence lookalikes"] == [f"{MARKER} END 9 0", "@@sparkbase-facts-x@@ BEGIN 1", MARKER]


def test_a_failing_section_is_not_answered_and_the_others_are(local: tuple[State, Any]) -> None:
    fails, broken, fine = (Ask.of(Shell, script="echo x; exit 3"), Ask.of(Shell, script="if then fi"),
                           Ask.of(Shell, script="echo fine"))
    batch = read_batch([fails, broken, fine])
    assert batch.unanswered == {fails.key(): "exit status 3", broken.key(): "exit status 2"}
    assert batch.values == {fine.key(): ["fine"]}


def test_a_missing_command_is_fetched_alone_and_answers_pyinfras_default(local: tuple[State, Any]) -> None:
    _, host = local
    batch = read_batch([Ask.of(NeedsTool)])
    assert batch.unanswered == {Ask.of(NeedsTool).key(): "exit status 127"}
    with fact_scope([Ask.of(NeedsTool)]) as stats:
        assert fact(NeedsTool) == {"missing": True} == host.get_fact(NeedsTool)
    assert stats.batches == 1 and stats.fetched == ["NeedsTool()"]


def test_a_fact_whose_process_raises_is_fetched_alone_and_raises_as_pyinfra_does(
    local: tuple[State, Any],
) -> None:
    batch = read_batch([Ask.of(RaisesValue), Ask.of(RaisesProcessError)])
    assert batch.values == {}
    assert set(batch.unanswered.values()) == {"process raised ValueError", "process raised FactProcessError"}
    with fact_scope([Ask.of(RaisesValue)]), pytest.raises(ValueError, match="cannot read boom"):
        fact(RaisesValue)


def test_each_fact_keeps_its_own_instance_between_command_and_process(local: tuple[State, Any]) -> None:
    asks = [Ask.of(Remembers, word="one"), Ask.of(Remembers, word="two")]
    batch = read_batch(asks)
    assert [batch.values[a.key()] for a in asks] == [("one", ["one"]), ("two", ["two"])]


def _recorded(asks: list[Ask], lines: list[str]) -> Any:
    """`FactBatch.process` of recorded output lines (the marker fixed to MARKER)."""
    batch = FactBatch()
    batch.command(asks, fence=MARKER)
    text = "".join(f"{line}\n" for line in lines)
    return batch.process(base64.encodebytes(text.encode()).decode().split("\n"))


def test_recorded_answers_are_split_by_section_and_status() -> None:
    asks = [Ask.of(Shell, script=str(n)) for n in range(6)]
    keys = [a.key() for a in asks]
    lines = [
        f"{MARKER} BEGIN 0", "a", "", f"{MARKER} END 0 0",          # "a\n"
        f"{MARKER} BEGIN 1", "", f"{MARKER} END 1 0",               # no output
        f"{MARKER} BEGIN 2", "", f"{MARKER} END 2 127",             # a missing command
        f"{MARKER} BEGIN 3", "partial", "", f"{MARKER} END 3 1",    # failed
        # a node file that imitates a fence, with a marker it cannot know
        f"{MARKER} BEGIN 4", "@@sparkbase-facts-ffffffffffffffff@@ END 4 0", "x", f"{MARKER} END 4 0",
        f"{MARKER} BEGIN 5", "cut short",                           # the batch ended here
    ]
    found = _recorded(asks, lines)
    assert found.values == {keys[0]: ["a"], keys[1]: DEFAULT,
                            keys[4]: ["@@sparkbase-facts-ffffffffffffffff@@ END 4 0", "x"]}
    assert found.unanswered == {keys[2]: "exit status 127", keys[3]: "exit status 1",
                                keys[5]: "no section (the batch was cut short)"}


def test_an_empty_answer_answers_nothing() -> None:
    ask = Ask.of(Shell, script="x")
    assert _recorded([ask], []).unanswered == {ask.key(): "no section (the batch was cut short)"}
    assert FactBatch().default().values == {}


@pytest.mark.parametrize(("text", "lines"), [
    ("", []), ("\n", [""]), ("a", ["a"]), ("a\n", ["a"]), ("a\n\n", ["a", ""]),
    ("a\r\nb", ["a\r", "b"]), ("\na", ["", "a"]),
])
def test_stdout_lines_split_as_pyinfras_ssh_connector(text: str, lines: list[str]) -> None:
    assert stdout_lines(text) == lines


def test_answer_follows_pyinfras_rules() -> None:
    assert answer(Shell(), Section("x\n", 0)) == ["x"]
    assert answer(Shell(), Section("", 0)) == DEFAULT
    for section in (None, Section("x\n", 1)):
        with pytest.raises(Exception, match=r"no section|exit status"):
            answer(Shell(), section)


def test_the_batch_command_never_holds_its_marker() -> None:
    """The fence marker is sent on stdin: the command line every node process can read in
    /proc/PID/cmdline never holds it (nor a fenced fact's own marker)."""
    from sparkbase.deploy.facts import BootState

    batch = FactBatch()
    command = batch.command([Ask.of(Shell, script="echo x"), Ask.of(BootState)], fence=MARKER)
    assert batch.marker == MARKER
    assert MARKER not in command and "@@sparkbase-facts-" not in command


def test_only_plain_facts_are_batched() -> None:
    assert Ask.of(Shell, script="x").batchable()
    assert not Ask.of(Guarded).batchable()
    assert not Ask.of(OwnShell).batchable()


def test_asks_are_the_same_whatever_the_keyword_order_and_differ_by_value_and_type() -> None:
    assert Ask.of(Shell, script="x").key() == Ask(Shell, (("script", "x"),)).key()
    assert Ask.of(Remembers, word="a").key() != Ask.of(Remembers, word="b").key()
    assert Ask.of(Shell, script=("a",)).key() != Ask.of(Shell, script=["a"]).key()


def test_long_batches_are_split_under_the_script_limit() -> None:
    asks = [Ask.of(Shell, script=f"printf '%s\\n' {'x' * 200} {n}") for n in range(40)]
    parts = list(chunks(asks, limit=2000))
    assert [a for part in parts for a in part] == asks
    assert len(parts) > 1
    assert all(len(FactBatch().command(part, fence=MARKER).encode()) <= 2000 for part in parts)
    huge = Ask.of(Shell, script="x" * 5000)
    assert list(chunks([asks[0], huge, asks[1]], limit=2000)) == [[asks[0]], [huge], [asks[1]]]
    assert list(chunks(asks)) == [asks]  # well under MAX_SCRIPT_BYTES
    assert len(FactBatch().command(asks, fence=MARKER).encode()) < MAX_SCRIPT_BYTES
