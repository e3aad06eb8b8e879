"""The validated-site cache never changes what a site load returns."""

from __future__ import annotations

import os
import pickle
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkbase.errors import ConfigError
from sparkbase.model import cache as site_cache
from sparkbase.model import site as site_module
from sparkbase.model.site import Site, load_site


@pytest.fixture(autouse=True)
def _cache_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(site_cache.DISABLE_ENV, raising=False)


def _cache(site: Path) -> Path:
    return site_cache.cache_file(site.resolve())


def _no_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any load from YAML fail the test: what follows must come from the cache."""

    def refuse(root: Path, inventory: Path | None) -> Site:
        raise AssertionError("the site was parsed again")

    monkeypatch.setattr(site_module, "_load_site", refuse)


def test_first_load_writes_a_private_cache_and_second_load_uses_it(
    site_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_site(site_copy, cache=True)
    mode = stat.S_IMODE(_cache(site_copy).stat().st_mode)
    assert mode == 0o600
    _no_parsing(monkeypatch)
    second = load_site(site_copy, cache=True)
    assert second == first
    assert second.warnings == first.warnings and second.warnings  # still there to print


def test_cached_site_equals_an_uncached_load(site_copy: Path) -> None:
    load_site(site_copy, cache=True)
    assert load_site(site_copy, cache=True) == load_site(site_copy)


def test_without_cache_flag_nothing_is_written(site_copy: Path) -> None:
    load_site(site_copy)
    assert not _cache(site_copy).exists()


def test_disabled_by_environment(site_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(site_cache.DISABLE_ENV, "1")
    load_site(site_copy, cache=True)
    assert not _cache(site_copy).exists()


def _set_address(text: str) -> str:
    old = "management_address: null"
    assert old in text
    return text.replace(old, "management_address: 10.9.9.9", 1)


def test_an_edited_file_is_read_again(site_copy: Path) -> None:
    before = load_site(site_copy, cache=True)
    assert before.inventory.nodes["spark1"].management_address is None
    inventory = site_copy / "inventory" / "site.yaml"
    inventory.write_text(_set_address(inventory.read_text()))
    after = load_site(site_copy, cache=True)
    assert str(after.inventory.nodes["spark1"].management_address) == "10.9.9.9"


def test_an_edit_that_breaks_the_site_is_an_error_not_the_cached_site(site_copy: Path) -> None:
    load_site(site_copy, cache=True)
    lane = next((site_copy / "lanes").glob("*.yaml"))
    lane.write_text("baseline: [\n")
    with pytest.raises(ConfigError):
        load_site(site_copy, cache=True)


def test_a_new_file_in_lanes_is_seen(site_copy: Path) -> None:
    load_site(site_copy, cache=True)
    (site_copy / "lanes" / "notes.txt").write_text("hello\n")
    with pytest.raises(ConfigError) as raised:
        load_site(site_copy, cache=True)
    assert any("notes.txt" in str(problem.file) for problem in raised.value.problems)


def test_a_site_with_errors_is_never_cached(site_copy: Path) -> None:
    (site_copy / "lanes" / "broken.yaml").write_text("baseline: [\n")
    for _ in range(2):
        with pytest.raises(ConfigError):
            load_site(site_copy, cache=True)
    assert not _cache(site_copy).exists()


def _garbage(data: bytes) -> bytes:
    return b"\x00" * len(data)


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _body_flipped(data: bytes) -> bytes:
    return data[:40] + bytes([data[40] ^ 0xFF]) + data[41:]


def _other_key(data: bytes) -> bytes:
    return bytes([data[0] ^ 0xFF]) + data[1:]


def _not_a_site(data: bytes) -> bytes:
    return data[:32] + pickle.dumps({"baselines": {}})


def _empty(data: bytes) -> bytes:
    return b""


CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "zeroed": _garbage,
    "truncated": _truncated,
    "pickle byte flipped": _body_flipped,
    "key of another site": _other_key,
    "pickle of something else": _not_a_site,
    "empty": _empty,
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_a_corrupt_cache_still_gives_the_right_answer(
    site_copy: Path, corrupt: Callable[[bytes], bytes]
) -> None:
    expected = load_site(site_copy)
    load_site(site_copy, cache=True)
    path = _cache(site_copy)
    path.write_bytes(corrupt(path.read_bytes()))
    assert load_site(site_copy, cache=True) == expected
    # and the cache is sound again afterwards
    assert site_cache.load_cached(site_copy.resolve(), path.read_bytes()[:32], Site) == expected


def test_a_cache_others_may_write_is_not_trusted(
    site_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_site(site_copy, cache=True)
    path = _cache(site_copy)
    key = path.read_bytes()[:32]
    os.chmod(path, 0o620)
    assert site_cache.load_cached(site_copy.resolve(), key, Site) is None


def test_a_cache_that_is_a_link_is_not_followed(site_copy: Path, tmp_path: Path) -> None:
    load_site(site_copy, cache=True)
    path = _cache(site_copy)
    moved = tmp_path / "elsewhere.pickle"
    path.rename(moved)
    path.symlink_to(moved)
    assert site_cache.load_cached(site_copy.resolve(), moved.read_bytes()[:32], Site) is None


def test_the_key_covers_version_and_code(site_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = site_copy.resolve()
    inventory = root / "inventory" / "site.yaml"
    key = site_cache.site_key(root, inventory, ("baselines", "lanes"))
    assert site_cache.site_key(root, inventory, ("baselines", "lanes")) == key
    monkeypatch.setattr(site_cache, "__version__", "9.9.9")
    assert site_cache.site_key(root, inventory, ("baselines", "lanes")) != key
    monkeypatch.undo()
    monkeypatch.setattr(site_cache, "_code_stamp", lambda: b"other code")
    assert site_cache.site_key(root, inventory, ("baselines", "lanes")) != key


def test_an_unwritable_site_just_goes_without_cache(
    site_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(path: Path, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("sparkbase.atomicfile.write_atomic", refuse)
    assert load_site(site_copy, cache=True) == load_site(site_copy)


def test_the_key_covers_the_parsing_libraries(site_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = site_copy.resolve()
    inventory = root / "inventory" / "site.yaml"
    key = site_cache.site_key(root, inventory, ("baselines", "lanes"))
    monkeypatch.setattr(site_cache, "_installed_stamp", lambda module: f"{module}: upgraded")
    assert site_cache.site_key(root, inventory, ("baselines", "lanes")) != key


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_fifo_or_endless_file_among_site_files_is_refused_not_waited_on(site_copy: Path, kind: str) -> None:
    """Hashing the files for the cache key reads them as the loader does: bounded, regular
    files only (a FIFO would block the reader, a link to /dev/zero would never end)."""
    target = site_copy / "lanes" / "glm-fp8.yaml"
    target.unlink()
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match=r"glm-fp8\.yaml"):
        load_site(site_copy, cache=True)
    assert not _cache(site_copy).exists()
