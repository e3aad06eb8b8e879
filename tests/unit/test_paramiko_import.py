"""paramiko imported without importlib.metadata: its version (in the SSH banner) unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from sparkbase.transport.paramiko_import import installed_version, metadata_version


@pytest.mark.parametrize("name", ["paramiko", "cryptography", "sparkbase"])
def test_the_installed_version_is_importlib_metadatas(name: str) -> None:
    """A wheel's dist-info beside the package, or (sparkbase, installed editable) the real
    module's answer."""
    assert installed_version(name) == metadata.version(name)


#: METADATA text -> the version read for distribution `demo` (None: ask importlib.metadata)
METADATA_CASES = {
    "Metadata-Version: 2.1\nName: demo\nVersion: 1.2.3\n\nVersion: 9\n": "1.2.3",
    "Name: Demo\nSummary: s\nVersion: 4.0\n": "4.0",
    "Name: other\nVersion: 1.0\n": None,
    "Name: demo\n\nVersion: 2.0\n": None,
    "Name: demo\nSummary: a\n  Version: 3.0\n": None,
    "": None,
}


@pytest.mark.parametrize(("text", "version"), METADATA_CASES.items())
def test_metadata_headers(tmp_path: Path, text: str, version: str | None) -> None:
    path = tmp_path / "METADATA"
    path.write_text(text)
    assert metadata_version(path, "demo") == version


def test_paramiko_imports_without_importlib_metadata_and_says_its_version() -> None:
    code = (
        "import json, sys\nfrom sparkbase.transport.paramiko_import import import_paramiko\n"
        "import_paramiko()\nimport paramiko, paramiko.transport\n"
        "print(json.dumps([paramiko.__version__, paramiko.transport.Transport._CLIENT_ID,\n"
        "                  'importlib.metadata' in sys.modules, 'invoke' in sys.modules]))"
    )
    answer = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            timeout=60)
    version, client_id, metadata_loaded, invoke_loaded = json.loads(answer.stdout)
    assert version == metadata.version("paramiko")
    assert client_id == f"paramiko_{version}"
    assert not metadata_loaded and not invoke_loaded
