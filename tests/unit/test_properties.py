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

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from quick import examples

from sparkbase.errors import ConfigError
from sparkbase.model.baseline import Baseline
from sparkbase.model.cmdline import rendered_kernel_args
from sparkbase.model.site import Site, load_site
from sparkbase.render import render_baseline

#: each distinct file content is parsed once (tests/unit/site_memo.py): an example changes one file
pytestmark = pytest.mark.usefixtures("parsed_once")

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
PROPERTY = settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
        f'GRUB_CMDLINE_LINUX_DEFAULT="{" ".join(rendered_kernel_args(baseline))}"',
    ]
    for content in files.values():
        assert "\r" not in content
    for value in [*env.values(), *baseline.memory.sysctls.values(), *rendered_kernel_args(baseline)]:
        assert not any(char in value for char in UNSAFE)


#: fields whose text lands in a rendered file or on a command line
FILE_FIELDS: list[tuple[str | int, ...]] = [
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


# --- names, paths and numbers written into the site files -----------------------------

FIELD_PROPERTY = settings(max_examples=examples(60), deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])

#: (file, the exact line to replace, the line with {} where a YAML scalar goes, dotted field)
NAME_SLOTS: list[tuple[str, str, str]] = [
    ("inventory/site.yaml", "  spark1:\n    ssh_host: spark1\n", "  {}:\n    ssh_host: spark1\n"),
    ("inventory/site.yaml", "    ssh_host: spark1\n", "    ssh_host: {}\n"),
    (
        "inventory/site.yaml",
        "    baseline: site-stock-6.17-4k\n    links:\n      - port: 0\n        peer: spark2\n",
        "    baseline: {}\n    links:\n      - port: 0\n        peer: spark2\n",
    ),
    (
        "inventory/site.yaml",
        "        peer: spark2\n        peer_port: 1\n",
        "        peer: {}\n        peer_port: 1\n",
    ),
    ("lanes/glm-fp8.yaml", "baseline: site-stock-6.17-4k\n", "baseline: {}\n"),
    ("lanes/glm-fp8.yaml", "nodes: [spark1, spark2, spark3, spark4]", "nodes: [{}, spark2, spark3, spark4]"),
    ("baselines/site-stock-6.17-4k.yaml", "extends: spark-common\n", "extends: {}\n"),
    ("baselines/site.yaml", "site: four-spark-ring\n", "site: {}\n"),
    ("baselines/site.yaml", "  - id: kernel-pin-7x-64k\n", "  - id: {}\n"),
    ("baselines/spark-common.yaml", "    socket_ifname: enP7s7\n", "    socket_ifname: {}\n"),
]
PATH_SLOTS: list[tuple[str, str, str]] = [
    ("inventory/site.yaml", "  config: inventory/ssh_config ", "  config: {} "),
    ("inventory/site.yaml", "  known_hosts: inventory/known_hosts ", "  known_hosts: {} "),
    (
        "baselines/site-stock-6.17-4k.yaml",
        "    path: /opt/nccl-site/lib/libnccl.so.2.27.7\n",
        "    path: {}\n",
    ),
    ("baselines/ds41f-7x-64k.yaml", "    path: /swap-64k.img\n", "    path: {}\n"),
    ("baselines/spark-common.yaml", "  slice: sparkbase-serving.slice\n", "  slice: {}\n"),
    ("baselines/spark-common.yaml", "  disable_services: [gdm3.service, ", "  disable_services: [{}, "),
]


def site_with_line(relative: str, old: str, new: str) -> dict[str, bytes]:
    """The shipped `relative` with the one occurrence of `old` replaced by `new`."""
    text = (REPO / relative).read_text()
    assert text.count(old) == 1, (relative, old)
    return {relative: text.replace(old, new).encode("utf-8", "surrogatepass")}


def yaml_scalar(text: str) -> str:
    """`text` as a YAML double-quoted scalar (JSON's escapes are YAML's)."""
    return json.dumps(text)


@FIELD_PROPERTY
@given(slot=st.sampled_from(NAME_SLOTS), text=st.text(max_size=80))
def test_any_text_in_a_name_field_loads_or_fails_located(slot: tuple[str, str, str], text: str) -> None:
    relative, old, new = slot
    with site_with(site_with_line(relative, old, new.format(yaml_scalar(text)))) as root:
        load_or_problems(root)


@FIELD_PROPERTY
@given(
    slot=st.sampled_from(PATH_SLOTS),
    text=st.text(max_size=300)
    | st.sampled_from(
        [
            "/dev/zero",
            "/proc/self/mem",
            "/etc/passwd",
            "../../etc/shadow",
            "/",
            "//",
            "~root/x",
            "\x00",
            "/a/./b",
        ]
    ),
)
def test_any_text_in_a_path_field_loads_or_fails_located(slot: tuple[str, str, str], text: str) -> None:
    relative, old, new = slot
    with site_with(site_with_line(relative, old, new.format(yaml_scalar(text)))) as root:
        load_or_problems(root)


@FIELD_PROPERTY
@given(name=st.text(alphabet=st.characters(blacklist_characters="/\x00"), min_size=1, max_size=60))
def test_any_lane_file_name_loads_or_fails_located(name: str) -> None:
    if name in {".", ".."} or len(name.encode("utf-8", "surrogatepass")) > 200:
        return
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate cannot be a file name here
        return
    lane = (REPO / "lanes/glm-fp8.yaml").read_bytes()
    with site_with({f"lanes/{name}": lane}) as root:
        load_or_problems(root)


#: (file, the exact line, the line with {} for the number, dotted field, lowest and highest allowed)
NUMBER_SLOTS: list[tuple[str, str, str, str, int, int]] = [
    ("inventory/site.yaml", "    rank: 0\n", "    rank: {}\n", "nodes.spark1.rank", 0, 255),
    (
        "inventory/site.yaml",
        "        peer_port: 1\n        paths:\n          - {netdev: enp1s0f0np0, hca: rocep1s0f0, "
        "peer_netdev: enp1s0f1np1, subnet: 10.12.1.0/24",
        "        peer_port: {}\n        paths:\n          - {{netdev: enp1s0f0np0, hca: rocep1s0f0, "
        "peer_netdev: enp1s0f1np1, subnet: 10.12.1.0/24",
        "nodes.spark1.links[0].peer_port",
        0,
        1,
    ),
    ("baselines/spark-common.yaml", "  mtu: 9000\n", "  mtu: {}\n", "fabric.mtu", 1280, 9216),
    ("baselines/spark-common.yaml", "  gid_index: 3 ", "  gid_index: {} ", "fabric.gid_index", 0, 255),
    (
        "baselines/spark-common.yaml",
        "    ib_gid_index: 3\n",
        "    ib_gid_index: {}\n",
        "nccl.settings.ib_gid_index",
        0,
        255,
    ),
    (
        "baselines/ds41f-7x-64k.yaml",
        "    size_gib: 16\n",
        "    size_gib: {}\n",
        "memory.swap.size_gib",
        1,
        512,
    ),
    (
        "baselines/ds41f-7x-64k.yaml",
        "      min_nchannels: 4\n",
        "      min_nchannels: {}\n",
        "nccl.shapes.ring4.min_nchannels",
        1,
        64,
    ),
    ("baselines/site.yaml", "    more_than: 3\n", "    more_than: {}\n", "triggers[1].more_than", 0, 100_000),
    (
        "baselines/site.yaml",
        "    window_minutes: 60\n",
        "    window_minutes: {}\n",
        "triggers[1].window_minutes",
        1,
        10_080,
    ),
    (
        "baselines/site.yaml",
        "    min_context_tokens: 500000\n",
        "    min_context_tokens: {}\n",
        "triggers[1].min_context_tokens",
        1,
        100_000_000,
    ),
]


def line_of(relative: str, old: str) -> int:
    """1-based line where `old` starts in the shipped `relative`."""
    text = (REPO / relative).read_text()
    return text[: text.index(old)].count("\n") + 1


@FIELD_PROPERTY
@given(
    slot=st.sampled_from(NUMBER_SLOTS),
    below=st.booleans(),
    distance=st.integers(min_value=1, max_value=10**60),
)
def test_any_number_out_of_range_is_a_located_error(
    slot: tuple[str, str, str, str, int, int], below: bool, distance: int
) -> None:
    relative, old, new, field, low, high = slot
    value = low - distance if below else high + distance
    expected_line = line_of(relative, old)
    with site_with(site_with_line(relative, old, new.format(value))) as root:
        try:
            load_site(root)
        except ConfigError as exc:
            hits = [
                p
                for p in exc.problems
                if p.file.name == Path(relative).name
                and p.line == expected_line
                and (p.path == field or "out of range" in p.message)
            ]
            assert hits, [p.format() for p in exc.problems]
        else:
            raise AssertionError(f"{field}: {value} was accepted")


@FIELD_PROPERTY
@given(
    cpus=st.from_regex(r"[0-9]{1,20}(-[0-9]{1,20})?(,[0-9]{1,20}(-[0-9]{1,20})?){0,3}", fullmatch=True)
    | st.text(max_size=40)
)
def test_any_cpu_list_is_bounded(cpus: str) -> None:
    started = time.monotonic()
    line = "  cpus: 5-9,15-19  # the ten Cortex-X925 cores\n"
    files = site_with_line("baselines/spark-common.yaml", line, f"  cpus: {yaml_scalar(cpus)}\n")
    with site_with(files) as root:
        site = load_or_problems(root)
    assert time.monotonic() - started < 10  # never expanded into memory
    if site is not None:
        assert all(0 <= cpu <= 4095 for b in site.baselines.values() for cpu in b.cpuset.cpus)
