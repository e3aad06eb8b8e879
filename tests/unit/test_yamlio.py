"""The YAML dialect sparkbase reads (1.2 core, nothing more) and the bounded file reader.

ruamel.yaml's behaviour is pinned here: if an upgrade changed how `010` or `off` read,
these tests say so before a baseline silently changes meaning.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from sparkbase.boundedfile import FileRefused
from sparkbase.errors import ConfigError
from sparkbase.model.yamlio import load_yaml, read_site_file

#: (YAML value text, what it must load as) under YAML 1.2
SCALARS: list[tuple[str, Any]] = [
    ("010", 10),  # decimal in 1.2 (1.1 read octal 8)
    ("0010", 10),
    ("0o10", 8),  # 1.2's octal spelling
    ("0x1f", 31),
    ("off", "off"),  # text in 1.2 (1.1 read false)
    ("on", "on"),
    ("yes", "yes"),
    ("no", "no"),
    ("y", "y"),
    ("true", True),
    ("false", False),
    ("null", None),
    ("~", None),
    ("1_000", 1000),  # ruamel still reads 1.1's digit separators; no field takes such text
    ("1:20", "1:20"),  # sexagesimal in 1.1, text in 1.2
    ("2026-01-31", "2026-01-31"),  # a date stays its text
    ("'010'", "010"),
    ("6.17", 6.17),
    ('"6.17"', "6.17"),
]


def write(tmp_path: Path, text: str) -> Path:
    file = tmp_path / "f.yaml"
    file.write_text(text)
    return file


def problem_of(file: Path) -> tuple[int, int, str, str]:
    with pytest.raises(ConfigError) as raised:
        load_yaml(file)
    [problem] = raised.value.problems
    return problem.line, problem.column, problem.path, problem.message


@pytest.mark.parametrize(("text", "expected"), SCALARS)
def test_yaml_1_2_scalars(tmp_path: Path, text: str, expected: Any) -> None:
    loaded = load_yaml(write(tmp_path, f"value: {text}\n")).data["value"]
    assert loaded == expected and type(loaded) is type(expected)


def test_an_explicit_yaml_1_2_directive_is_accepted(tmp_path: Path) -> None:
    assert load_yaml(write(tmp_path, "%YAML 1.2\n---\na: 010\nb: off\n")).data == {"a": 10, "b": "off"}


#: (file text, line, column, field path, message part) of the one problem it must give
REFUSED: list[tuple[str, int, int, str, str]] = [
    ("%YAML 1.1\n---\na: 010\n", 1, 1, "", "site files are YAML 1.2 only"),
    ("# c\n\n%YAML 1.1\n---\na: off\n", 3, 1, "", "site files are YAML 1.2 only"),
    ("%TAG !x! tag:example.com,2026:\n---\na: 1\n", 1, 1, "", "not allowed"),
    ("b: &b {x: 1}\nc:\n  y: 2\n  <<: *b\n", 4, 3, "", "merge key '<<' is not allowed"),
    ("c: {<<: {x: 1}}\n", 1, 5, "", "merge key '<<' is not allowed"),
    ("a: 1\n1: x\n", 2, 1, "", "mapping key 1 is a number"),
    ("n:\n  1: x\n  '1': y\n", 2, 3, "n", "mapping key 1 is a number"),
    ("n:\n  true: x\n", 2, 3, "n", "mapping key true is a boolean"),
    ("null: x\n", 1, 1, "", "mapping key null is null"),
    ("? [a]\n: x\n", 1, 3, "", "keys must be text"),
    ("a: !x 1\n", 1, 1, "a", "YAML tag '!x' is not allowed"),
    ("a: !!binary aGk=\n", 1, 1, "a", "binary data is not allowed"),
    ("a: " + "7" * 41 + "\n", 1, 4, "", "a number of 41 characters is out of range"),
    # flow nesting is bounded before ruamel scans it (its scanner is quadratic in depth)
    ("a: " + "[" * 41 + "]" * 41 + "\n", 1, 44, "", "nested deeper than 40 levels"),
    ("a:\n  b: " + "{x: " * 41 + "1" + "}" * 41 + "\n", 2, 166, "", "nested deeper than 40 levels"),
]


@pytest.mark.parametrize(("text", "line", "column", "path", "message"), REFUSED)
def test_refused_yaml_is_located(
    tmp_path: Path, text: str, line: int, column: int, path: str, message: str
) -> None:
    got = problem_of(write(tmp_path, text))
    assert got[:3] == (line, column, path) and message in got[3], got


def test_forty_digits_are_still_a_number(tmp_path: Path) -> None:
    assert load_yaml(write(tmp_path, "a: " + "7" * 40 + "\n")).data["a"] == int("7" * 40)


def _in_thread(target: Path) -> tuple[list[BaseException], threading.Thread]:
    errors: list[BaseException] = []

    def read() -> None:
        try:
            load_yaml(target)
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(timeout=5)
    return errors, thread


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: os.mkfifo(p), "is a FIFO"),
        (lambda p: p.symlink_to("/dev/zero"), "is a character device"),
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: p.symlink_to(p.name), "cannot read file"),
    ],
)
def test_non_regular_files_are_refused_without_blocking(tmp_path: Path, make: Any, message: str) -> None:
    target = tmp_path / "site.yaml"
    make(target)
    errors, thread = _in_thread(target)
    assert not thread.is_alive(), "reading blocked"
    [error] = errors
    assert isinstance(error, ConfigError)
    assert message in error.problems[0].message


def test_the_size_is_checked_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as handle:  # sparse: 2 GiB claimed, nothing to read
        handle.truncate(2 * 1024**3)
    with pytest.raises(FileRefused, match="the limit is"):
        read_site_file(big, limit=1024)


#: texts with many brackets that do not nest deeper than 40: quoted, commented, or closed
NOT_DEEP = [
    "a: '" + "[" * 50 + "'\n",
    'a: "' + "{" * 50 + '"\n',
    'a: "\\"' + "[" * 50 + '"\n',
    "a: 1  # " + "[" * 50 + "\n",
    "a: [" + ", ".join(["[1]"] * 50) + "]\n",
    "a: " + "[" * 40 + "]" * 40 + "\n",
]


@pytest.mark.parametrize("text", NOT_DEEP)
def test_brackets_that_do_not_nest_deep_are_read(tmp_path: Path, text: str) -> None:
    assert "a" in load_yaml(write(tmp_path, text)).data

