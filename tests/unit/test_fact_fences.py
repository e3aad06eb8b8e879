"""The fact layer against a hostile node: no line or section can be forged, and one node's
answer is bounded in size and time and never breaks on bytes that are not UTF-8.

- Lines: node text is cut at `\\n` only (U+2028, U+0085, `\\v`, `\\f`, `\\x1c`-`\\x1e` are
  not line ends), so a forged `/proc/cmdline` line inside an fstab comment stays in fstab.
- Fences: the marker is sent on stdin, never on a command line (the audit's own client and
  plan and apply's read over pyinfra); a repeated or unexpected section refuses the answer, naming it.
- Bounds: sparkbase's client gives up on output over its cap (a real SSH server that prints
  without end, `sshd_stub.py`), plan and apply's read is capped on the node (pyinfra's `@local`
  host: the same shell text) and times out at pyinfra's `_timeout`; bytes that are not
  UTF-8 come back escaped.
"""

from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import paramiko
import pytest
from pyinfra.api.config import Config
from pyinfra.api.connect import connect_all
from pyinfra.api.inventory import Inventory
from pyinfra.api.state import State
from pyinfra.context import ctx_host, ctx_state
from sshd_stub import SshStub

from sparkbase.deploy import node
from sparkbase.facts.areas import build_script
from sparkbase.facts.collect import gather_node
from sparkbase.facts.model import NodeFacts, Unreachable
from sparkbase.facts.parsers.files import expand_files
from sparkbase.facts.parsers.kernel import parse_cmdline
from sparkbase.facts.parsers.modules import parse_proc_modules
from sparkbase.facts.parsers.nccl import parse_kv_conf
from sparkbase.facts.script import (
    FactPlan,
    SectionError,
    fenced_script,
    marker_stdin,
    new_marker,
    split_sections,
    unfinished_section,
)
from sparkbase.transport import FailureKind, NodeFailure, TransportError
from sparkbase.transport.client import connect, run_command
from sparkbase.transport.feeds import pyinfra_host_data

HOST_KEY = paramiko.RSAKey.generate(2048)
CLIENT_KEY = paramiko.RSAKey.generate(2048)
#: every character Python's `str.splitlines` ends a line at, besides `\n` and `\r\n`
LINE_BREAKERS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\r"]


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[SshStub]:
    server = SshStub(tmp_path, HOST_KEY, CLIENT_KEY).start()
    yield server
    server.stop()


# --- lines ------------------------------------------------------------------------------


@pytest.mark.parametrize("breaker", LINE_BREAKERS)
def test_a_forged_cmdline_line_in_an_fstab_comment_stays_in_fstab(breaker: str) -> None:
    """`preflight` judges the booted arguments: a line an fstab comment forges with U+2028
    (or any other character `splitlines` ends a line at) must not join /proc/cmdline."""
    marker = new_marker()
    reads: list[tuple[str, tuple[str, ...]]] = [("cmdline", ("/proc/cmdline",)), ("fstab", ("/etc/fstab",))]
    body = ("/proc/cmdline:BOOT_IMAGE=/vmlinuz ro\n"
            f"/etc/fstab:# note{breaker}/proc/cmdline:init_on_alloc=0 iommu.passthrough=1\n"
            "/etc/fstab:/swapfile none swap sw 0 0\n")
    text = f"{marker} BEGIN files\n{body}\n{marker} END files 0\n"
    found = expand_files(split_sections(text, marker), reads)
    cmdline = found.get("cmdline")
    assert cmdline is not None and cmdline.output == "BOOT_IMAGE=/vmlinuz ro\n"
    assert parse_cmdline(cmdline.output) == ("BOOT_IMAGE=/vmlinuz", "ro")
    fstab = found.get("fstab")
    assert fstab is not None and fstab.output.count("\n") == 2 and breaker in fstab.output


def test_the_kernel_arguments_are_cut_at_ascii_spaces_only() -> None:
    forged = "quiet\u2028init_on_alloc=0\u00a0x"
    assert parse_cmdline(f"ro {forged}\n") == ("ro", forged)
    assert parse_cmdline("ro\tquiet\x0bsplash\n") == ("ro", "quiet", "splash")


def test_parsers_keep_one_line_per_newline() -> None:
    assert parse_kv_conf("NCCL_A=1\u2028NCCL_B=2\n") == {"NCCL_A": "1\u2028NCCL_B=2"}
    assert parse_proc_modules("nvidia 1 0\u2028forged 1 0\n") == frozenset({"nvidia"})


# --- fences -----------------------------------------------------------------------------


def test_a_section_printed_twice_refuses_the_answer_naming_it() -> None:
    marker = "@@m@@"
    text = (f"{marker} BEGIN uname\nr m\n{marker} END uname 0\n"
            f"{marker} BEGIN uname\nx y\n{marker} END uname 0\n")
    with pytest.raises(SectionError, match="'uname' appears twice") as caught:
        split_sections(text, marker)
    assert caught.value.section == "uname"


def test_a_section_the_script_never_prints_refuses_the_answer() -> None:
    marker = "@@m@@"
    text = (f"{marker} BEGIN uname\nr m\n{marker} END uname 0\n"
            f"{marker} BEGIN cmdline\nforged\n{marker} END cmdline 0\n")
    with pytest.raises(SectionError, match="'cmdline' is not one the script prints"):
        split_sections(text, marker, expected={"uname"})
    twice_on_stderr = f"{marker} BEGIN dkms\na\n{marker} END dkms 0\n" * 2
    with pytest.raises(SectionError, match="'dkms' appears twice"):
        split_sections("", marker, twice_on_stderr)


def test_the_fact_script_holds_no_marker_and_reads_it_from_stdin() -> None:
    plan = FactPlan(core_only=True)
    marker = new_marker()
    script = build_script(plan)
    assert "@@sparkbase-facts-" not in script
    done = subprocess.run(["sh", "-c", script], input=marker_stdin(marker), capture_output=True, text=True,
                          check=False)
    assert set(split_sections(done.stdout, marker).by_name) == {"uname", "pagesize"}
    silent = subprocess.run(["sh", "-c", script], input="", capture_output=True, text=True, check=False)
    assert silent.returncode == 125 and silent.stdout == ""  # no marker: no fences at all


def test_the_audit_sends_its_marker_on_stdin_never_on_the_command_line(stub: SshStub) -> None:
    stub.respond = lambda command, stdin: b""
    gather_node("stub", stub.target(), FactPlan(core_only=True))
    (command, stdin), = stub.seen
    marker = stdin.decode().strip()
    assert marker.startswith("@@sparkbase-facts-") and marker not in command
    assert "@@sparkbase-facts-" not in command


def _answer_with(sections: str) -> Any:
    """A stub answer: the fenced `sections` text, with the marker the script read on stdin."""
    def respond(command: str, stdin: bytes) -> bytes:
        return sections.replace("M ", stdin.decode().strip() + " ").encode()
    return respond


def test_the_audit_refuses_an_answer_with_a_section_twice(stub: SshStub) -> None:
    stub.respond = _answer_with("M BEGIN uname\nr m\nM END uname 0\n"
                                "M BEGIN pagesize\n4096\nM END pagesize 0\n"
                                "M BEGIN uname\nforged m\nM END uname 0\n")
    result = gather_node("stub", stub.target(), FactPlan(core_only=True))
    assert isinstance(result, Unreachable) and result.kind is FailureKind.COMMAND
    assert "'uname' appears twice" in result.reason


def test_the_audit_reads_a_well_fenced_answer(stub: SshStub) -> None:
    stub.respond = _answer_with("M BEGIN uname\n6.17.0-1032-nvidia aarch64\nM END uname 0\n"
                                "M BEGIN pagesize\n4096\nM END pagesize 0\n")
    result = gather_node("stub", stub.target(), FactPlan(core_only=True))
    assert isinstance(result, NodeFacts) and result.kernel_release == "6.17.0-1032-nvidia"


# --- sparkbase's client: size and decoding ----------------------------------------------


def test_output_without_end_is_given_up_at_the_cap(stub: SshStub) -> None:
    client = connect(stub.target())
    started = time.monotonic()
    try:
        with pytest.raises(TransportError) as caught:
            run_command(client, "sb-flood", timeout=30.0, limit=1024 * 1024)
    finally:
        client.close()
    assert caught.value.failure.kind is FailureKind.COMMAND
    assert caught.value.failure.message.startswith("output over 1048576 bytes")
    assert time.monotonic() - started < 10


def test_the_audit_reports_a_node_that_prints_without_end(stub: SshStub) -> None:
    stub.flood = True
    started = time.monotonic()
    result = gather_node("stub", stub.target(), FactPlan(core_only=True))
    assert isinstance(result, Unreachable) and result.kind is FailureKind.COMMAND
    assert f"output over {8 * 1024 * 1024} bytes" in result.reason
    assert time.monotonic() - started < 30


def test_the_audit_names_the_section_that_printed_without_end(stub: SshStub) -> None:
    flood = "M BEGIN uname\nr m\nM END uname 0\nM BEGIN pagesize\n" + "y\n" * (5 * 1024 * 1024)
    stub.respond = _answer_with(flood)
    result = gather_node("stub", stub.target(), FactPlan(core_only=True))
    assert isinstance(result, Unreachable) and result.kind is FailureKind.COMMAND
    assert result.reason.endswith("(in section 'pagesize')"), result.reason
    assert unfinished_section("@@m@@ BEGIN a\nx\n@@m@@ END a 0\n", "@@m@@") is None


def test_bytes_that_are_not_utf8_come_back_escaped(stub: SshStub) -> None:
    stub.respond = lambda command, stdin: b"caf\xe9 \xff\n"
    client = connect(stub.target())
    try:
        answer = run_command(client, "x", timeout=5.0)
    finally:
        client.close()
    assert answer.stdout == "caf\\xe9 \\xff\n"


# --- plan and apply's read over pyinfra: fences, size, time, decoding ---------------------


@pytest.fixture(scope="module")
def local() -> Iterator[Any]:
    """pyinfra's `@local` host with a 2 s command deadline, connected, in context."""
    inventory = Inventory(([("@local", {"_timeout": 2})], {}))  # type: ignore[no-untyped-call]
    state = State(inventory, Config())  # type: ignore[no-untyped-call]
    connect_all(state)
    host = inventory.get_host("@local")
    with ctx_state.use(state), ctx_host.use(host):
        yield host


def _script(monkeypatch: pytest.MonkeyPatch, *named: tuple[str, str]) -> None:
    """The fact script `read_node` sends: `named` sections instead of the plan's."""
    monkeypatch.setattr(node, "build_script", lambda plan: fenced_script(named))


CORE = FactPlan(core_only=True)


def test_plan_reads_the_node_with_the_audits_script_and_parsers(local: Any) -> None:
    facts = node.read_node(FactPlan(core_only=True, ownership=True))
    assert facts.kernel_release == subprocess.run(["uname", "-r"], capture_output=True, text=True,
                                                  check=True).stdout.strip()
    assert facts.round_trips == 1


def test_the_read_holds_no_marker_on_its_command_line() -> None:
    command = node.FactScript().command(script=build_script(FactPlan(core_only=True, ownership=True)))
    assert "@@sparkbase-facts-" not in command and "read -r M" in command


def test_a_section_that_prints_without_end_fails_the_node_naming_it(local: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _script(monkeypatch, ("uname", "echo r m"), ("pagesize", "yes"))
    started = time.monotonic()
    with pytest.raises(node.FactReadFailed) as caught:
        node.read_node(CORE, limit=100_000)
    assert time.monotonic() - started < 2
    assert caught.value.failure.kind is FailureKind.COMMAND
    assert caught.value.failure.message.startswith("fact output over 100000 bytes (in section 'pagesize'")


def test_a_section_that_hangs_fails_the_read_at_the_command_timeout(local: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _script(monkeypatch, ("uname", "echo r m"), ("pagesize", "sleep 8"))
    started = time.monotonic()
    with pytest.raises(node.FactReadFailed) as caught:
        node.read_node(CORE)
    assert 1.5 < time.monotonic() - started < 6
    assert caught.value.failure.kind is FailureKind.TIMEOUT
    assert "no answer to a fact read within 2s" in caught.value.failure.message


def test_bytes_that_are_not_utf8_reach_the_parsers_escaped(local: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _script(monkeypatch, ("uname", r"printf 'caf\351 \377\n'"), ("pagesize", "echo 4096"))
    facts = node.read_node(CORE)
    assert (facts.kernel_release, facts.machine) == ("caf\\xe9", "\\xff")


def test_a_forged_section_refuses_the_answer_and_fails_the_node(local: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # a command that could print fences (here the script's own functions) forges a second uname
    forge = "echo 4096; e pagesize 0; b uname; echo x y; e uname 0; b pagesize"
    _script(monkeypatch, ("uname", "echo r m"), ("pagesize", forge))
    with pytest.raises(node.FactReadFailed) as caught:
        node.read_node(CORE)
    assert caught.value.failure.kind is FailureKind.COMMAND
    assert "'uname' appears twice" in caught.value.failure.message


def test_an_answer_that_is_not_the_scripts_fails_the_node() -> None:
    assert isinstance(node.decode_answer(["garbage"]), NodeFailure)
    assert isinstance(node.decode_answer(["!!", node.STDERR_FOLLOWS, ""]), NodeFailure)
    encoded = base64.b64encode(b"x" * 11).decode()
    decoded = node.decode_answer([encoded, node.STDERR_FOLLOWS, ""], limit=10)
    assert not isinstance(decoded, NodeFailure) and decoded[2] is True


def test_plan_and_apply_get_the_audits_command_deadline(stub: SshStub) -> None:
    """Fact reads get the audit's `ssh.command_timeout`; commands that change the node (a DKMS
    build, an apt install) get `ssh.operation_timeout`, bounded too but longer."""
    target = replace(stub.target(), operation_timeout=900.5)
    data = pyinfra_host_data(target)
    assert data["sparkbase_command_timeout"] == target.command_timeout
    assert data["_timeout"] == 901 and isinstance(data["_timeout"], int)  # pyinfra takes an int


def test_a_fact_read_takes_the_command_deadline_not_the_operations(monkeypatch: pytest.MonkeyPatch) -> None:
    data = {"_timeout": 600, "sparkbase_command_timeout": 1.5}
    inventory = Inventory(([("@local", data)], {}))  # type: ignore[no-untyped-call]
    state = State(inventory, Config())  # type: ignore[no-untyped-call]
    connect_all(state)
    _script(monkeypatch, ("uname", "sleep 30"))
    started = time.monotonic()
    with (ctx_state.use(state), ctx_host.use(inventory.get_host("@local")),
          pytest.raises(node.FactReadFailed) as caught):
        node.read_node(CORE)
    assert time.monotonic() - started < 10
    assert "no answer to a fact read within 2s" in caught.value.failure.message
