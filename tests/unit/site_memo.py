"""Parse each distinct site file once: the unit tier loads the shipped site thousands of
times, and hundreds of sites which differ from it in a file or two (the invalid corpus, the
property tests).

`load_yaml` is a pure function of a file's bytes (only the file name in its result is the
file's), and ruamel's round-trip parse is most of what a site load costs, so a kept parse is
handed out again as a deep copy relocated to the file asked for. tests/unit/conftest.py puts
it in front of the site loader for the whole unit run (`pytest_configure`; the module-scoped
fixture `parsed_once` does the same for one module). test_invalid_corpus.py runs a sample of
cases without it and checks they print the same.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

from sparkbase.model.yamlio import Location, YamlDocument

#: site files larger than this are parsed every time (never kept)
MEMO_LIMIT = 256 * 1024
_PARSED: dict[bytes, YamlDocument] = {}


def load_yaml_memoised(real: Callable[[Path], YamlDocument], file: Path) -> YamlDocument:
    """`real(file)` (the site loader's `load_yaml`), parsed once per distinct content.

    Links, special files, big files and failures go to `real` every time (their refusal is
    what is tested); nothing is kept from a call that raised.
    """
    if file.is_symlink() or not file.is_file() or file.stat().st_size > MEMO_LIMIT:
        return real(file)
    raw = file.read_bytes()
    if raw not in _PARSED:
        _PARSED[raw] = real(file)
    kept = _PARSED[raw]
    locations = {key: Location(file, at.line, at.column) for key, at in kept.locations.items()}
    return YamlDocument(file=file, data=copy.deepcopy(kept.data), locations=locations)
