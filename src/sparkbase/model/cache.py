"""A cache of the validated site, so the launch gate does not parse YAML on every call.

Loading a site parses every YAML file with ruamel (comments and positions kept) and
validates it with pydantic: close to half of a `preflight`'s own CPU (docs/benchmarks/,
"issue 23: simpler gate"). The result depends only on the bytes of the files the loader
reads, on sparkbase's code and version, on Python's and on the parsing libraries', so it
is kept in `<site>/.sparkbase/cache/site.pickle` under a key made of exactly those. Only
the typed site is kept: what the audit and the gate work out from it is worked out anew.

Never trusted blindly: the cache is used only when its key equals the key computed now
from the files' current content (sha256 of every entry the loader lists or reads), when
the file belongs to this user and nobody else may write it, and when it unpickles into a
`Site`. Anything else (a missing, stale, foreign or corrupt cache) is a miss: the site is
loaded from its YAML as without a cache, and the cache rewritten. A site with errors is
never cached. Warnings travel with the cached site (`Site.warnings`), so they are still
printed. Writing is atomic (a temporary file, then a rename) with mode 0600; a site
directory that cannot be written just goes without a cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pickle
import stat
import sys
from pathlib import Path
from typing import TypeVar

from sparkbase import __version__
from sparkbase.atomicfile import write_atomic
from sparkbase.boundedfile import FileRefused, read_regular_file
from sparkbase.model.yamlio import MAX_FILE_BYTES

#: where the cache lives, relative to the site root
CACHE_DIR = Path(".sparkbase") / "cache"
CACHE_FILE = "site.pickle"
#: set to any non-empty value to load every site from its YAML
DISABLE_ENV = "SPARKBASE_NO_SITE_CACHE"
#: bumped when the key's recipe or the cached object's shape changes
_CACHE_FORMAT = "3"
_KEY_SIZE = 32  # a sha256 digest, stored before the pickle
#: libraries whose version can change what a site load returns (parsing, validation, and
#: the rules that judge what is rendered)
_PARSING_DEPENDENCIES = ("ruamel.yaml", "pydantic", "pydantic_core", "jinja2")
#: files of the package whose content shapes a load
_CODE_SUFFIXES = (".py", ".j2")

#: the loader's `Site` (`sparkbase.model.site` names it to `load_cached`: it imports this module)
SiteT = TypeVar("SiteT")

def cache_file(root: Path) -> Path:
    """The cache file of the site at `root`."""
    return root / CACHE_DIR / CACHE_FILE


def site_key(root: Path, inventory_file: Path, directories: tuple[str, ...]) -> bytes:
    """A digest of everything a site load depends on.

    The content of every entry of `directories` (names included: a new, renamed or removed
    file changes the key, as it changes what the loader reports), the inventory file's
    path and content, the site root, sparkbase's version and Python's, the size and
    modification time of every module of sparkbase (a checkout edited between releases
    keeps its version number) and where and how big ruamel.yaml, pydantic and jinja2 are.
    """
    digest = hashlib.sha256()
    for part in (_CACHE_FORMAT, __version__, sys.version, str(root), str(inventory_file)):
        _feed(digest, part.encode())
    _feed(digest, _code_stamp())
    _feed(digest, _content_digest(inventory_file))
    for name in directories:
        directory = root / name
        _feed(digest, name.encode())
        try:
            entries = sorted(directory.iterdir())
        except OSError as exc:
            _feed(digest, f"<unlisted: {type(exc).__name__}>".encode())
            continue
        for entry in entries:
            _feed(digest, entry.name.encode())
            _feed(digest, _content_digest(entry))
    return digest.digest()


def load_cached(root: Path, key: bytes, kind: type[SiteT]) -> SiteT | None:
    """The cached site of `root` if its key is `key` and it is a sound `kind`, else None."""
    if os.environ.get(DISABLE_ENV):
        return None
    site = _read_pickle(cache_file(root), key)
    return site if isinstance(site, kind) else None


def store(root: Path, key: bytes, site: object) -> None:
    """Keep `site` under `key`; silently nothing when the site directory is not writable."""
    if not os.environ.get(DISABLE_ENV):
        _write_pickle(cache_file(root), key, site)


def _read_pickle(path: Path, key: bytes) -> object:
    """What the cache file `path` holds under `key`, or None: a missing, foreign, writable
    by others, linked, stale or corrupt file is a miss."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not _trusted(info):
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read()
    except OSError:
        return None
    finally:
        os.close(fd)
    if data[:_KEY_SIZE] != key:
        return None
    try:
        # ours and no one else's to write (checked above); whoever can write it can edit the site
        return pickle.loads(data[_KEY_SIZE:])  # noqa: S301
    except Exception:  # a corrupt cache is a miss, whatever unpickling raises
        return None


def _write_pickle(path: Path, key: bytes, value: object) -> None:
    """Write `value` under `key` to the cache file `path` (0600, atomic; not fsynced: a cache
    lost in a crash is rebuilt); silently nothing when it cannot be written."""
    try:
        data = key + pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        write_atomic(path, data, mode=0o600, durable=False)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        return


def _code_stamp() -> bytes:
    """Size and mtime of every module and template of the installed sparkbase package."""
    package = Path(__file__).resolve().parent.parent
    parts: list[str] = []
    for directory, subdirectories, files in os.walk(package):
        subdirectories[:] = sorted(name for name in subdirectories if name != "__pycache__")
        for name in sorted(files):
            if not name.endswith(_CODE_SUFFIXES):
                continue
            path = os.path.join(directory, name)
            try:
                info = os.stat(path)
            except OSError:
                continue
            parts.append(f"{os.path.relpath(path, package)}:{info.st_size}:{info.st_mtime_ns}")
    for dependency in _PARSING_DEPENDENCIES:
        parts.append(f"{dependency}:{_installed_stamp(dependency)}")
    return "\n".join(parts).encode()


def _installed_stamp(module: str) -> str:
    """Where `module` is installed and its file's size and mtime: changes with an upgrade
    (found without importing it: ruamel.yaml is imported only when YAML is parsed)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return "<absent>"
    origin = spec.origin if spec is not None else None
    if origin is None:
        return "<absent>"
    try:
        info = os.stat(origin)
    except OSError:
        return f"{origin}:<unreadable>"
    return f"{origin}:{info.st_size}:{info.st_mtime_ns}"


def _trusted(info: os.stat_result) -> bool:
    """A regular file of ours that no one else may write."""
    return (
        stat.S_ISREG(info.st_mode)
        and info.st_uid == os.geteuid()
        and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def _content_digest(path: Path) -> bytes:
    """sha256 of a site file's bytes, read as the loader reads it (regular files only, bounded:
    a FIFO or a link to /dev/zero is never waited on); a marker for what is not read."""
    try:
        return hashlib.sha256(read_regular_file(path, MAX_FILE_BYTES)).digest()
    except FileRefused as exc:
        return f"<{exc.refusal}: {exc.detail}>".encode()


def _feed(digest: hashlib._Hash, part: bytes) -> None:
    """Add `part` to `digest`, length first, so no two sequences of parts collide."""
    digest.update(len(part).to_bytes(8, "big"))
    digest.update(part)
