"""paramiko imported without invoke: its version (in the SSH banner) unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata


def test_paramiko_imports_without_invoke_and_says_its_version() -> None:
    code = (
        "import json, sys\nfrom sparkbase.transport.paramiko_import import import_paramiko\n"
        "import_paramiko()\nimport paramiko, paramiko.transport\n"
        "print(json.dumps([paramiko.__version__, paramiko.transport.Transport._CLIENT_ID,\n"
        "                  'invoke' in sys.modules]))"
    )
    answer = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            timeout=60)
    version, client_id, invoke_loaded = json.loads(answer.stdout)
    assert version == metadata.version("paramiko")
    assert client_id == f"paramiko_{version}"
    assert not invoke_loaded
