"""`FileText` reads a file's text whatever its bytes: base64 on the wire (paramiko decodes a
command's output as strict UTF-8, and one Latin-1 byte cut pyinfra's reading short, so
`plan` showed an empty diff), the text as a `cat` of a UTF-8 file always gave it."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api.exceptions import FactProcessError

from sparkbase.deploy.facts import MISSING, TEXT_FOLLOWS, FileText, file_text


def answer(data: bytes) -> list[str]:
    """What the node prints for an existing file holding `data` (base64 wraps at 76)."""
    encoded = base64.encodebytes(data).decode()
    return [TEXT_FOLLOWS, *encoded.splitlines()]


CASES = [
    ("utf-8 lines", b"NCCL_IB_HCA=rocep1s0f0\n# caf\xc3\xa9\n", "NCCL_IB_HCA=rocep1s0f0\n# caf\u00e9\n"),
    ("no final newline", b"a\nb", "a\nb\n"),
    ("a carriage return kept", b"a\r\nb\n", "a\r\nb\n"),
    ("empty lines kept", b"\n\na\n\n", "\n\na\n\n"),
    ("latin-1 byte", b"# caf\xe9\nNCCL_IB_MERGE_NICS=0\n", "# caf\ufffd\nNCCL_IB_MERGE_NICS=0\n"),
    ("empty file", b"", ""),
    ("long file, many base64 lines", b"x" * 1000 + b"\n", "x" * 1000 + "\n"),
]


@pytest.mark.parametrize("data,text", [(data, text) for _, data, text in CASES],
                         ids=[name for name, _, _ in CASES])
def test_the_text_is_the_files_bytes_as_lines(data: bytes, text: str) -> None:
    assert FileText().process(answer(data)) == text
    assert file_text(data) == text


def test_a_missing_file_is_none() -> None:
    assert FileText().process([MISSING]) is None


@pytest.mark.parametrize("output", [["plain text, no marker"], [TEXT_FOLLOWS, "not base64!"]])
def test_an_answer_that_is_not_the_commands_is_a_fact_error(output: list[str]) -> None:
    with pytest.raises(FactProcessError):
        FileText().process(output)


def test_a_byte_that_is_not_utf8_no_longer_hashes_as_the_file() -> None:
    """What keeps the fstab editor off a file it cannot read back byte for byte."""
    data = b"/swap.img none swap sw 0 0 # caf\xe9\n"
    assert file_text(data).encode() != data


@pytest.mark.parametrize("data,text", [(data, text) for _, data, text in CASES],
                         ids=[name for name, _, _ in CASES])
def test_pyinfra_reads_the_file_through_the_real_command(
    local: Any, tmp_path: Path, data: bytes, text: str
) -> None:
    path = tmp_path / "file name with spaces"
    path.write_bytes(data)
    assert local.get_fact(FileText, path=str(path)) == text
    assert local.get_fact(FileText, path=str(tmp_path / "absent")) is None
