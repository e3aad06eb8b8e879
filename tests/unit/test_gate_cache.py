"""The compiled expectations kept beside the validated-site cache never change what the gate judges."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkbase.audit import expected as expected_module
from sparkbase.audit.checks.files import FileWant
from sparkbase.audit.compiled import DERIVED_NAME, CompiledNode, compile_node, expectations
from sparkbase.audit.expected import Expected, expected_for
from sparkbase.model import cache as site_cache
from sparkbase.model.site import Site, load_site
from sparkbase.render import SYSCTL_PATH

NODES = ("spark1", "spark2", "spark3", "spark4")
VARIANT = "ds41f-7x-64k"
MAP_COUNT = "vm.max_map_count: 1048576"


@pytest.fixture(autouse=True)
def _cache_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(site_cache.DISABLE_ENV, raising=False)


def _kept(site: Path) -> Path:
    return site_cache.derived_file(site.resolve(), DERIVED_NAME)


def _no_rendering(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any computed expectation fail the test: what follows must come from the cache."""

    def refuse(site: Site, node: str, baseline_name: str | None = None) -> Expected:
        raise AssertionError(f"{node}'s expectations were computed again")

    monkeypatch.setattr(expected_module, "expected_for", refuse)


def _uncached(site: Path, baseline: str | None = None) -> dict[str, CompiledNode]:
    plain = load_site(site)
    return {node: compile_node(expected_for(plain, node, baseline)) for node in NODES}


@pytest.mark.parametrize("baseline", [None, VARIANT], ids=["inventory's baseline", "a lane's baseline"])
def test_kept_expectations_equal_computed_ones_and_are_reused(
    site_copy: Path, monkeypatch: pytest.MonkeyPatch, baseline: str | None
) -> None:
    first = expectations(load_site(site_copy, cache=True), NODES, baseline)
    assert first == _uncached(site_copy, baseline)
    assert _kept(site_copy).is_file()
    _no_rendering(monkeypatch)
    # as the next command does: a new load of the unchanged site, from the cache
    again = expectations(load_site(site_copy, cache=True), NODES, baseline)
    assert again == first
    assert list(again) == list(NODES)


def test_another_baseline_is_added_beside_the_kept_ones(
    site_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expectations(load_site(site_copy, cache=True), NODES)
    expectations(load_site(site_copy, cache=True), NODES, VARIANT)
    _no_rendering(monkeypatch)
    site = load_site(site_copy, cache=True)
    assert expectations(site, NODES) == _uncached(site_copy)
    assert expectations(site, NODES, VARIANT) == _uncached(site_copy, VARIANT)


def test_an_edited_baseline_gives_the_new_files(site_copy: Path) -> None:
    before = expectations(load_site(site_copy, cache=True), ["spark1"])["spark1"]
    assert _sysctl_sha256(before) == _rendered_sysctl(site_copy, "vm.max_map_count = 1048576")
    baseline = site_copy / "baselines" / "site-stock-6.17-4k.yaml"
    text = baseline.read_text()
    assert text.count(MAP_COUNT) == 1
    baseline.write_text(text.replace(MAP_COUNT, "vm.max_map_count: 2097152"))
    after = expectations(load_site(site_copy, cache=True), ["spark1"])["spark1"]
    assert _sysctl_sha256(after) == _rendered_sysctl(site_copy, "vm.max_map_count = 2097152")
    assert _sysctl_sha256(after) != _sysctl_sha256(before)
    assert after == _uncached(site_copy)["spark1"]


def _sysctl_sha256(node: CompiledNode) -> str:
    """The sha256 the compiled file check expects of the sysctl drop-in."""
    wants = [c.want for c in node.checks if isinstance(c.want, FileWant) and c.want.path == SYSCTL_PATH]
    assert len(wants) == 1
    return wants[0].sha256


def _rendered_sysctl(site: Path, line: str) -> str:
    """The sha256 of spark1's sysctl drop-in rendered now, which must hold `line`."""
    rendered = expected_for(load_site(site), "spark1").file(SYSCTL_PATH)
    assert rendered is not None and line in rendered.content
    return rendered.sha256


def test_the_key_covers_the_templates_and_their_engine() -> None:
    stamp = site_cache._code_stamp()
    assert b"render/templates/sysctl.conf.j2:" in stamp
    assert b"\njinja2:" in stamp and b"jinja2:<absent>" not in stamp


def _zeroed(data: bytes) -> bytes:
    return b"\x00" * len(data)


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _key_of_another_site(data: bytes) -> bytes:
    return bytes([data[0] ^ 0xFF]) + data[1:]


def _not_expectations(data: bytes) -> bytes:
    return data[:32] + pickle.dumps({("spark1", None): "not an Expected"})


def _not_a_dict(data: bytes) -> bytes:
    return data[:32] + pickle.dumps(["spark1"])


CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "zeroed": _zeroed,
    "truncated": _truncated,
    "key of another site": _key_of_another_site,
    "values of another kind": _not_expectations,
    "not a dict": _not_a_dict,
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_a_corrupt_file_still_gives_the_right_answer_and_is_rebuilt(
    site_copy: Path, monkeypatch: pytest.MonkeyPatch, corrupt: Callable[[bytes], bytes]
) -> None:
    right = _uncached(site_copy)
    expectations(load_site(site_copy, cache=True), NODES)
    path = _kept(site_copy)
    path.write_bytes(corrupt(path.read_bytes()))
    assert expectations(load_site(site_copy, cache=True), NODES) == right
    _no_rendering(monkeypatch)
    assert expectations(load_site(site_copy, cache=True), NODES) == right


def test_a_site_loaded_without_the_cache_keeps_nothing(site_copy: Path) -> None:
    expectations(load_site(site_copy), NODES)
    assert not _kept(site_copy).exists()


def test_disabled_by_environment(site_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(site_cache.DISABLE_ENV, "1")
    expectations(load_site(site_copy, cache=True), NODES)
    assert not _kept(site_copy).exists()


def test_a_changed_copy_of_a_cached_site_is_computed_not_looked_up(
    site_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A site changed in memory (as `--baseline` assigns nodes another baseline) is not the
    site the kept expectations were computed for."""
    site = load_site(site_copy, cache=True)
    expectations(site, NODES)
    nodes = {name: node.model_copy(update={"baseline": VARIANT})
             for name, node in site.inventory.nodes.items()}
    changed = dataclasses.replace(site, inventory=site.inventory.model_copy(update={"nodes": nodes}))
    found = expectations(changed, NODES)
    assert {expected.baseline_name for expected in found.values()} == {VARIANT}
    assert found == {node: compile_node(expected_for(changed, node)) for node in NODES}
