"""Unit-tier fixtures (the shared ones are in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from site_memo import load_yaml_memoised


@pytest.fixture(scope="module")
def parsed_once() -> Iterator[None]:
    """Site loads in the module parse each distinct file content once (site_memo.py)."""
    from sparkbase.model import site as site_module
    from sparkbase.model.yamlio import load_yaml as real
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(site_module, "load_yaml", lambda file: load_yaml_memoised(real, file))
        yield
