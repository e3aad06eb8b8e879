"""nccl.conf read as NCCL reads it (NVIDIA/nccl src/misc/param.cc `setEnvFile`, master
5067397c): first line of a key wins, spaces and quotes are part of names and values, `#`
only in the first column is a comment; and the runtime check's findings on such files."""

from __future__ import annotations

import pytest

from sparkbase.audit.runtime import conf_notes, conf_problems, nccl_env_problems
from sparkbase.facts.parsers.nccl import ConfAssignment, parse_kv_conf, parse_nccl_conf
from sparkbase.facts.runtime import ServingProcess

KEY = "NCCL_IB_MERGE_NICS"

#: conf text -> (what NCCL sets MERGE_NICS to, what a last-wins, trimming reading says)
READINGS = {
    "first line wins": ("NCCL_IB_MERGE_NICS=1\nNCCL_IB_MERGE_NICS=0\n", "1", "0"),
    "spaces around '=' make another name": ("NCCL_IB_MERGE_NICS = 0\n", None, "0"),
    "a space before the name": (" NCCL_IB_MERGE_NICS=0\n", None, "0"),
    "the value keeps its spaces": ("NCCL_IB_MERGE_NICS= 0\n", " 0", "0"),
    "quotes are part of the value": ('NCCL_IB_MERGE_NICS="0"\n', '"0"', '"0"'),
    "'#' in the first column is a comment": ("#NCCL_IB_MERGE_NICS=1\nNCCL_IB_MERGE_NICS=0\n", "0", "0"),
    "an indented '#' is not": (" #x=1\nNCCL_IB_MERGE_NICS=0\n", "0", "0"),
    "text after '#' is in the value": ("NCCL_IB_MERGE_NICS=0 # off\n", "0 # off", "0 # off"),
    "CRLF: one \\r removed": ("NCCL_IB_MERGE_NICS=0\r\n", "0", "0"),
    "no final newline": ("NCCL_IB_MERGE_NICS=0", "0", "0"),
    "a NUL ends the line": ("NCCL_IB_MERGE_NICS=0\0=1\n", "0", "0\0=1"),
    "only \\n ends a line": ("NCCL_IB_MERGE_NICS=0\x0bNCCL_X=1\n", "0\x0bNCCL_X=1", "0"),
    "the value after the first '='": ("NCCL_IB_MERGE_NICS==0\n", "=0", "=0"),
    "a line with no '='": ("NCCL_IB_MERGE_NICS\nNCCL_IB_MERGE_NICS=0\n", "0", "0"),
}


@pytest.mark.parametrize(("text", "nccl", "naive"), READINGS.values(), ids=READINGS.keys())
def test_nccl_reads_a_conf_file_as_param_cc_does(text: str, nccl: str | None, naive: str | None) -> None:
    assert parse_nccl_conf(text).value(KEY) == nccl
    if naive is not None and "\0" not in naive and "\x0b" not in text:
        assert parse_kv_conf(text).get(KEY) == naive  # the plain reading, for contrast


def test_a_long_line_is_read_in_fgets_pieces() -> None:
    """fgets(line, 4096) returns at most 4095 bytes: the rest of a longer line is read as a
    line of its own, so text past byte 4095 can set a variable."""
    first = "NCCL_A=" + "x" * (4095 - len("NCCL_A="))
    conf = parse_nccl_conf(first + "NCCL_B=1\n")
    assert [(a.line, a.name) for a in conf.assignments] == [(1, "NCCL_A"), (1, "NCCL_B")]
    assert conf.value("NCCL_B") == "1" and parse_kv_conf(first + "NCCL_B=1\n").get("NCCL_B") is None
    assert conf.value("NCCL_A") == "x" * 1023  # envValue[1024], strncpy 1023


def test_names_and_values_are_cut_at_1023_bytes() -> None:
    conf = parse_nccl_conf("N" * 1500 + "=1\nNCCL_B=" + "v" * 2000 + "\n")
    assert [len(a.name) for a in conf.assignments] == [1023, 6]
    assert len(conf.value("NCCL_B") or "") == 1023


def test_duplicates_with_their_lines() -> None:
    conf = parse_nccl_conf("# c\nNCCL_IB_MERGE_NICS=1\nNCCL_X=a\nNCCL_IB_MERGE_NICS=0\n"
                           "NCCL_IB_MERGE_NICS = 0\n")
    assert conf.duplicates() == {KEY: (ConfAssignment(2, KEY, "1"), ConfAssignment(4, KEY, "0"))}


def _process(user_conf: str | None = None, system_conf: str | None = None,
             env: dict[str, str] | None = None) -> ServingProcess:
    return ServingProcess(7, ("x",), env if env is not None else {"HOME": "/root"}, None, None, (), {},
                          user_conf, system_conf)


def test_the_user_file_beats_the_system_file_and_its_first_line_wins() -> None:
    process = _process("NCCL_IB_MERGE_NICS=1\nNCCL_IB_MERGE_NICS=0\n", "NCCL_IB_MERGE_NICS=0\n")
    assert process.nccl_setting(KEY, "1") == ("1", "~/.nccl.conf")


def test_a_key_twice_with_different_values_fails_naming_the_lines() -> None:
    """The issue's case: ~/.nccl.conf sets MERGE_NICS=1 then =0; a last-wins reading saw 0
    and passed the gate while NCCL runs with 1."""
    from test_runtime import probe

    process = _process("NCCL_IB_MERGE_NICS=1\nNCCL_IB_MERGE_NICS=0\n")
    problems = nccl_env_problems(process, probe(merge=0))
    assert problems[0] == "NCCL_IB_MERGE_NICS=1 (~/.nccl.conf), expected NCCL_IB_MERGE_NICS=0"
    assert problems[1] == ("~/.nccl.conf sets NCCL_IB_MERGE_NICS twice with different values "
                           "(line 1: '1', line 2: '0'); NCCL uses the first, '1'")


def test_a_doubled_key_fails_even_when_the_first_value_is_right() -> None:
    """NCCL takes 0 (right), but the file says 1 to anyone reading its last line, and to
    every tool that reads it so: refused until the file says one thing."""
    problems = conf_problems(_process(system_conf="NCCL_IB_MERGE_NICS=0\nNCCL_IB_MERGE_NICS=1\n"))
    assert problems == ["/etc/nccl.conf in the process's mount namespace sets NCCL_IB_MERGE_NICS twice "
                        "with different values (line 1: '0', line 2: '1'); NCCL uses the first, '0'"]


def test_a_name_with_spaces_fails_and_the_default_is_what_nccl_uses() -> None:
    from test_runtime import probe

    problems = nccl_env_problems(_process("NCCL_IB_MERGE_NICS = 0\n"), probe(merge=0))
    assert problems == [
        "NCCL_IB_MERGE_NICS=1 (NCCL's default), expected NCCL_IB_MERGE_NICS=0",
        "~/.nccl.conf line 1 sets 'NCCL_IB_MERGE_NICS ' (spaces are part of the name for NCCL): "
        "NCCL does not read it as NCCL_IB_MERGE_NICS",
    ]


def test_a_key_twice_with_one_value_is_a_note_not_a_failure() -> None:
    process = _process("NCCL_IB_MERGE_NICS=0\nNCCL_IB_MERGE_NICS=0\n")
    assert conf_problems(process) == []
    assert conf_notes(process) == ["~/.nccl.conf sets NCCL_IB_MERGE_NICS twice (lines 1, 2, same value; "
                                   "NCCL reads the first: an edit of a later line has no effect)"]


def test_the_environment_still_beats_every_file() -> None:
    process = _process("NCCL_IB_MERGE_NICS=1\n", env={KEY: "0"})
    assert process.nccl_setting(KEY, "1") == ("0", "environment")
