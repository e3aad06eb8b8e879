"""A file's text section (`state.file_text_command`, `parsers.files.parse_file_text`) reads
the file whatever its bytes: base64 on the wire (paramiko decodes a
command's output as strict UTF-8, and one Latin-1 byte cut pyinfra's reading short, so
`plan` showed an empty diff), the text as a `cat` of a UTF-8 file always gave it."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from sparkbase.facts.parsers.files import file_text, parse_file_text
from sparkbase.facts.state import MISSING, TEXT_FOLLOWS, file_text_command


def answer(data: bytes) -> str:
    """What the node prints for an existing file holding `data` (base64 wraps at 76)."""
    return f"{TEXT_FOLLOWS}\n{base64.encodebytes(data).decode()}"


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
    assert parse_file_text(answer(data)) == text
    assert file_text(data) == text


def test_a_missing_file_is_none() -> None:
    assert parse_file_text(f"{MISSING}\n") is None


@pytest.mark.parametrize("output", ["plain text, no marker\n", f"{TEXT_FOLLOWS}\nnot base64!\n"])
def test_an_answer_that_is_not_the_commands_is_unreadable(output: str) -> None:
    with pytest.raises(ValueError):
        parse_file_text(output)


def test_a_byte_that_is_not_utf8_no_longer_hashes_as_the_file() -> None:
    """What keeps the fstab editor off a file it cannot read back byte for byte."""
    data = b"/swap.img none swap sw 0 0 # caf\xe9\n"
    assert file_text(data).encode() != data


@pytest.mark.parametrize("data,text", [(data, text) for _, data, text in CASES],
                         ids=[name for name, _, _ in CASES])
def test_the_real_command_reads_the_file(tmp_path: Path, data: bytes, text: str) -> None:
    path = tmp_path / "file name with spaces"
    path.write_bytes(data)

    def read(at: Path) -> str | None:
        done = subprocess.run(["sh", "-c", file_text_command(str(at))], capture_output=True, text=True,
                              check=True)
        return parse_file_text(done.stdout)

    assert read(path) == text
    assert read(tmp_path / "absent") is None
    (tmp_path / "link").symlink_to(path)
    assert read(tmp_path / "link") is None  # a link is never read through
