"""Property-based tests (hypothesis) on the loader and the renderer.

- Loader: any text in any site file, and random mutations of the shipped files, either
  load into a valid Site or raise ConfigError whose every problem is located (file,
  line >= 1, column >= 1), says something, and prints as one line. Never another exception.
- Renderer: for any baseline the model accepts, rendered files contain only lines the
  model asked for (nccl.conf is exactly `as_env()`, sysctl.d exactly the sysctls, the
  GRUB drop-in exactly its two settings).
- String fields that land in files refuse newlines, quotes and `;`.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sparkbase.errors import ConfigError
from sparkbase.model.baseline import Baseline
from sparkbase.model.site import Site, load_site
from sparkbase.render import kernel_cmdline, render_baseline

REPO = Path(__file__).resolve().parents[2]
SITE_FILES = [
    "baselines/site.yaml",
    "baselines/spark-common.yaml",
    "baselines/site-stock-6.17-4k.yaml",
    "baselines/ds41f-7x-64k.yaml",
    "baselines/ds41f-stock-pages-262k.yaml",
    "inventory/site.yaml",
    "lanes/glm-fp8.yaml",
]
PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
UNSAFE = ("\n", "\r", '"', "'", ";", "`", "$")

#: characters that matter to YAML, so random text exercises the parser, not just scalars
yamlish = st.text(
    alphabet=st.sampled_from([*"abcNCL_:- \n\t[]{},&*!|>'\"#%@`?0123456789.=/\\", "\u00e9", "\x00"]),
    max_size=300,
)
#: tokens a mutation may insert: YAML syntax, hostile text, wrong types
TOKENS = [
    ":",
    "- ",
    "[",
    "]",
    "{",
    "}",
    "&a ",
    "*a",
    "!!python/object:os.system ",
    "\t",
    "\n",
    "\n  ",
    "'",
    '"',
    ";",
    "$(id)",
    "..",
    "~",
    "null",
    "true",
    "65536",
    "-1",
    "1e999",
    "0x10",
    "<<: *a",
    "? ",
    "|",
    ">",
    "#",
    "\x00",
    "\udcff",
    "\u2028",
    "extends: site.yaml",
    "abstract: true",
]


@contextmanager
def site_with(files: dict[str, bytes]) -> Iterator[Path]:
    """A temporary copy of the shipped site with some files replaced."""
    root = Path(tempfile.mkdtemp(prefix="sparkbase-prop-"))
    try:
        for relative in [*SITE_FILES, *[f"lanes/{p.name}" for p in (REPO / "lanes").glob("*.yaml")]]:
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / relative, root / relative)
        for relative, content in files.items():
            (root / relative).write_bytes(content)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def load_or_problems(root: Path) -> Site | None:
    """Load the site; on ConfigError check every problem is located and one line."""
    try:
        return load_site(root)
    except ConfigError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.file.name
            assert problem.line >= 1 and problem.column >= 1
            assert problem.message.strip()
            assert "\n" not in problem.format() and "\r" not in problem.format()
        return None


@PROPERTY
@given(relative=st.sampled_from(SITE_FILES), text=yamlish)
def test_any_text_loads_or_fails_located(relative: str, text: str) -> None:
    with site_with({relative: text.encode("utf-8", "surrogatepass")}) as root:
        load_or_problems(root)


@PROPERTY
@given(relative=st.sampled_from(SITE_FILES), data=st.binary(max_size=200))
def test_any_bytes_load_or_fail_located(relative: str, data: bytes) -> None:
    with site_with({relative: data}) as root:
        load_or_problems(root)


@PROPERTY
@given(
    relative=st.sampled_from(SITE_FILES),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["insert", "delete-line", "duplicate-line", "replace-value"]),
            st.integers(min_value=0, max_value=10_000),
            st.sampled_from(TOKENS) | st.text(max_size=12),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_mutated_shipped_files_load_or_fail_located(relative: str, edits: list[tuple[str, int, str]]) -> None:
    text = (REPO / relative).read_text()
    for action, where, token in edits:
        lines = text.split("\n")
        index = where % len(lines)
        if action == "insert":
            position = where % (len(text) + 1)
            text = text[:position] + token + text[position:]
        elif action == "delete-line":
            del lines[index]
            text = "\n".join(lines)
        elif action == "duplicate-line":
            lines.insert(index, lines[index])
            text = "\n".join(lines)
        else:
            key, colon, _ = lines[index].partition(":")
            if colon:
                lines[index] = f"{key}: {token}"
            text = "\n".join(lines)
    with site_with({relative: text.encode("utf-8", "surrogatepass")}) as root:
        load_or_problems(root)


# --- renderer -------------------------------------------------------------------------

_SHIPPED: dict[str, Any] = {}


def shipped_baseline_data(name: str) -> dict[str, Any]:
    """A concrete shipped baseline, fully merged, as plain data (loaded once)."""
    if not _SHIPPED:
        site = load_site(REPO)
        _SHIPPED.update({key: value.model_dump(mode="json") for key, value in site.baselines.items()})
    data: dict[str, Any] = _SHIPPED[name]
    return data


def body_lines(content: str) -> list[str]:
    return [line for line in content.splitlines() if line and not line.startswith("#")]


def files_of(baseline: Baseline) -> dict[str, str]:
    return {file.path: file.content for file in render_baseline("prop", baseline)}


def _accept(baseline: Baseline, data: dict[str, Any], candidate: dict[str, Any]) -> tuple[Baseline, Any]:
    """`candidate` when the model accepts it, else the previous state."""
    try:
        return Baseline.model_validate(candidate), candidate
    except ValidationError:
        return baseline, data


nccl_keys = st.from_regex(r"NCCL_[A-Z0-9_]{1,20}", fullmatch=True)
any_value = (
    st.text(max_size=30)
    | st.integers(min_value=-5, max_value=10**9).map(str)
    | st.sampled_from(["INFO\nNCCL_IB_HCA=x", "a;b", 'a"b', "a'b", "1", "mlx5_0:1,mlx5_1:1", "^=x"])
)


@PROPERTY
@given(
    name=st.sampled_from(["site-stock-6.17-4k", "ds41f-7x-64k", "ds41f-stock-pages-262k"]),
    extra=st.dictionaries(nccl_keys | st.text(max_size=12), any_value, max_size=5),
    sysctls=st.dictionaries(
        st.from_regex(r"(vm|kernel|net|fs)\.[a-z_]{1,12}", fullmatch=True) | st.text(max_size=12),
        any_value,
        max_size=5,
    ),
    cmdline=st.lists(
        st.from_regex(r"[a-z_.]{1,8}(=[a-z0-9,]{1,6})?", fullmatch=True) | any_value, max_size=4
    ),
)
def test_rendered_files_hold_only_what_the_model_asks(
    name: str, extra: dict[str, str], sysctls: dict[str, str], cmdline: list[str]
) -> None:
    # add the generated entries one by one, keeping those the model accepts: hostile ones
    # are refused (the test below checks nothing unsafe is ever kept), valid ones rendered
    data = shipped_baseline_data(name)
    baseline = Baseline.model_validate(data)
    for key, value in extra.items():
        settings_ = {**data["nccl"]["settings"], "extra": {**data["nccl"]["settings"]["extra"], key: value}}
        baseline, data = _accept(baseline, data, {**data, "nccl": {**data["nccl"], "settings": settings_}})
    for key, value in sysctls.items():
        memory = {**data["memory"], "sysctls": {**data["memory"]["sysctls"], key: value}}
        baseline, data = _accept(baseline, data, {**data, "memory": memory})
    for arg in cmdline:
        kernel = {**data["kernel"], "cmdline_add": [*data["kernel"]["cmdline_add"], arg]}
        baseline, data = _accept(baseline, data, {**data, "kernel": kernel})
    files = files_of(baseline)
    env = baseline.nccl.settings.as_env()
    assert body_lines(files["/etc/nccl.conf"]) == [f"{key}={value}" for key, value in env.items()]
    expected_sysctls = [f"{key} = {value}" for key, value in sorted(baseline.memory.sysctls.items())]
    assert body_lines(files["/etc/sysctl.d/90-sparkbase.conf"]) == expected_sysctls
    grub = body_lines(files["/etc/default/grub.d/60-sparkbase.cfg"])
    assert grub == [
        f'GRUB_DEFAULT="{baseline.kernel.grub_entry}"',
        f'GRUB_CMDLINE_LINUX_DEFAULT="{" ".join(kernel_cmdline(baseline))}"',
    ]
    for content in files.values():
        assert "\r" not in content
    for value in [*env.values(), *baseline.memory.sysctls.values(), *kernel_cmdline(baseline)]:
        assert not any(char in value for char in UNSAFE)


#: fields whose text lands in a rendered file or on a command line
FILE_FIELDS: list[tuple[str, ...]] = [
    ("kernel", "release"),
    ("kernel", "package_version"),
    ("nccl", "library", "path"),
    ("nccl", "settings", "socket_ifname"),
    ("cpuset", "slice"),
    ("os", "release"),
    ("driver", "version"),
    ("secure_boot", "mok_certificate"),
    ("host", "disable_services", 0),
]


def _set(data: Any, path: tuple[str | int, ...], value: str) -> Any:
    head, *rest = path
    copy = list(data) if isinstance(data, list) else dict(data)
    copy[head] = value if not rest else _set(data[head], tuple(rest), value)  # type: ignore[index]
    return copy


@PROPERTY
@given(
    path=st.sampled_from(FILE_FIELDS),
    text=st.text(max_size=40)
    | st.builds(lambda a, c, b: a + c + b, st.text(max_size=8), st.sampled_from(UNSAFE), st.text(max_size=8)),
)
def test_text_landing_in_files_cannot_carry_separators(path: tuple[str | int, ...], text: str) -> None:
    data = _set(shipped_baseline_data("site-stock-6.17-4k"), path, text)
    try:
        Baseline.model_validate(data)
    except ValidationError:
        return
    spaces_allowed = path == ("os", "release")  # "DGX OS 26.09": informational, audited only
    forbidden = (*UNSAFE, "\x00", "\t", *(() if spaces_allowed else (" ",)))
    assert not any(char in text for char in forbidden)


@pytest.mark.parametrize("value", ["a\nb", 'a"b', "a;b", "a'b", "a`b", "a$b", "a\rb"])
def test_known_separators_are_refused_in_nccl_values(value: str) -> None:
    data = shipped_baseline_data("site-stock-6.17-4k")
    data = {
        **data,
        "nccl": {**data["nccl"], "settings": {**data["nccl"]["settings"], "extra": {"NCCL_X": value}}},
    }
    with pytest.raises(ValidationError):
        Baseline.model_validate(data)
