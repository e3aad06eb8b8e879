"""The emulated fleet's distribution (lab/pyproject.toml, issue 23.5) goes with the product's:
the same version, a dependency on exactly that sparkbase, and the node shims as package data."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _project(path: Path) -> dict[str, object]:
    return dict(tomllib.loads(path.read_text())["project"])


def test_the_lab_has_the_products_version_and_needs_exactly_it() -> None:
    product = _project(REPO / "pyproject.toml")
    lab = _project(REPO / "lab" / "pyproject.toml")
    assert lab["name"] == "sparkbase-lab"
    assert lab["version"] == product["version"]
    assert f"sparkbase=={product['version']}" in list(lab["dependencies"])  # type: ignore[call-overload]


def test_the_product_wheel_data_names_no_lab_file_and_the_lab_carries_its_shims() -> None:
    product = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert not any("lab" in pattern for pattern in product["package-data"]["sparkbase"])
    lab = tomllib.loads((REPO / "lab" / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "shims/*" in lab["package-data"]["sparkbase_lab"]
    shims = REPO / "lab" / "src" / "sparkbase_lab" / "shims"
    assert (shims / "client.c").is_file() and (shims / "shim.py").is_file()
