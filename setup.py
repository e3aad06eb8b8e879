"""Build hook: the wheel carries the starter site (`sparkbase init`) as package data.

The starter site's files live once, in the repository's baselines/, inventory/, lanes/;
which ones is the rule in src/sparkbase/starter/__init__.py (loaded here by path, since
sparkbase is not installed while it builds). Everything else is in pyproject.toml.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _starter_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "_sparkbase_starter", HERE / "src" / "sparkbase" / "starter" / "__init__.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithStarterSite(build_py):
    """build_py, then copy the starter site into sparkbase/starter/site/ of the build."""

    def run(self) -> None:
        super().run()
        starter = _starter_module()
        destination = Path(self.build_lib) / "sparkbase" / "starter" / starter.PACKAGED_SITE
        if destination.exists():
            shutil.rmtree(destination)
        files = starter.site_files(HERE)
        if not files:
            raise SystemExit(f"setup.py: no starter site files under {HERE} (an sdist without them?)")
        for rel, source in files.items():
            target = destination / str(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)


setup(cmdclass={"build_py": BuildWithStarterSite})
