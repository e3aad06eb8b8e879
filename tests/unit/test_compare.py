"""`sparkbase compare`: differences field by field, contract breaches, adoption blockers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkbase.cli.main import main
from sparkbase.compare import blocker_area, diff_values

A, B = "site-stock-6.17-4k", "ds41f-7x-64k"


def compare_json(site: Path, capsys: pytest.CaptureFixture[str], a: str = A, b: str = B) -> dict[str, Any]:
    assert main(["compare", a, b, "--json", "--site", str(site)]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def test_json_shape_is_pinned(shipped_site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = compare_json(shipped_site, capsys)
    assert set(report) == {"format", "a", "b", "differences", "blockers"}
    assert report["format"] == 2
    for side in ("a", "b"):
        assert set(report[side]) == {"name", "version", "satisfies_contract", "contract_breaches"}
        for breach in report[side]["contract_breaches"]:
            assert set(breach) == {"path", "message"}
    assert report["differences"]
    for difference in report["differences"]:
        assert set(difference) == {"path", "a", "b", "a_source", "b_source", "breaks_contract", "blocker"}
        assert isinstance(difference["path"], str)
        assert set(difference["breaks_contract"]) <= {"a", "b"}
        assert difference["blocker"] is None or isinstance(difference["blocker"], str)


def test_variant_differences_are_judged(shipped_site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = compare_json(shipped_site, capsys)
    by_path = {d["path"]: d for d in report["differences"]}
    assert report["a"]["satisfies_contract"] is True
    assert report["b"]["satisfies_contract"] is False
    assert by_path["kernel.page_size"] == {
        "path": "kernel.page_size",
        "a": 4096,
        "b": 65536,
        "a_source": {"kind": "seed", "note": by_path["kernel.page_size"]["a_source"]["note"]},
        "b_source": {"kind": "recipe", "file": "config/cluster-64k.json", "commit": "6a70c129"},
        "breaks_contract": ["b"],
        "blocker": "page size",
    }
    assert by_path["kernel.release"]["breaks_contract"] == ["b"]
    assert by_path["nccl.settings.ib_merge_nics"]["blocker"] == "nccl merge"
    assert by_path["shapes[0].transport"]["breaks_contract"] == ["b"]
    assert by_path["driver.version"]["blocker"] == "driver"
    assert by_path["driver.version"]["breaks_contract"] == []  # the contract does not pin it
    assert by_path["memory.memory_saver.required"] == {
        "path": "memory.memory_saver.required",
        "a": None,
        "b": True,
        "a_source": None,
        "b_source": {"kind": "recipe", "file": "config/cluster-64k.json", "commit": "6a70c129"},
        "breaks_contract": ["b"],
        "blocker": "memory-saver",
    }
    assert by_path["host.nvme.apst"]["blocker"] is None
    assert "description" not in by_path
    assert "fabric.mtu" not in by_path  # equal fields are not listed
    assert set(report["blockers"]) >= {
        "kernel",
        "page size",
        "driver",
        "memory-saver",
        "nccl merge",
        "transport",
    }


def test_same_baseline_has_no_differences(shipped_site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert compare_json(shipped_site, capsys, A, A)["differences"] == []


def test_table_says_which_side_breaks_the_contract(
    shipped_site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", A, B, "--site", str(shipped_site)]) == 0
    out = capsys.readouterr().out
    page_line = next(line for line in out.splitlines() if line.startswith("kernel.page_size"))
    assert "4096" in page_line and "65536" in page_line and f"broken by {B}" in page_line
    assert f"{A} 1.3.0 satisfies the site contract." in out
    assert f"{B} 1.5.1 breaks the site contract" in out


def test_the_swap_difference_is_shown_with_its_source(
    shipped_site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The variant swaps at boot on the file for the booted page size (the 4 KiB fallback on
    the installer's /swap.img); the site baseline manages no swap (issue 24)."""
    by_path = {d["path"]: d for d in compare_json(shipped_site, capsys, A, B)["differences"]}
    chosen = by_path["memory.swap_by_page_size"]
    assert (chosen["a"], chosen["b"]) == (False, True)
    assert chosen["b_source"] == {"kind": "recipe", "file": "host/kernel-memory/spark3-kernel-memory",
                                  "commit": "db98392f", "note": chosen["b_source"]["note"]}
    assert (by_path["memory.swap.path"]["a"], by_path["memory.swap.path"]["b"]) == (None, "/swap-64k.img")
    assert by_path["memory.factory_swap.fstab"]["b"] == "noauto"
    services = by_path["host.disable_services"]["b"]
    assert services[0] == "gdm3.service" and "snapd.seeded.service" in services


@pytest.mark.parametrize("name", ["nope", "spark-common"])
def test_unknown_or_abstract_baseline_is_refused(
    shipped_site: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", A, name, "--site", str(shipped_site)]) == 2
    assert name in capsys.readouterr().err


def test_diff_values_walks_maps_lists_and_absent_sides() -> None:
    left = {"x": 1, "m": {"k": "a"}, "l": [{"n": 1}], "s": [1, 2], "o": None}
    right = {"x": 1, "m": {"k": "b", "j": 2}, "l": [{"n": 1}, {"n": 2}], "s": [1, 3], "o": {"p": 1}}
    assert diff_values(left, right) == [
        (("m", "k"), "a", "b"),
        (("m", "j"), None, 2),
        (("l", 1, "n"), None, 2),
        (("s",), [1, 2], [1, 3]),
        (("o", "p"), None, 1),
    ]


def test_blocker_areas() -> None:
    assert blocker_area(("secure_boot", "enabled")) == "secure boot"
    assert blocker_area(("shapes", 1, "transport")) == "transport"
    assert blocker_area(("memory", "transparent_hugepages")) is None


def test_the_os_and_the_nccl_of_each_shape_are_compared(
    shipped_site: Path, site_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The variant's DGX OS 26.09.2 against the site's release (a placeholder today), and the
    NCCL settings of each of its shapes against the site's one block."""
    differences = {d["path"]: d for d in compare_json(shipped_site, capsys)["differences"]}
    os_row = differences["os.release"]
    assert (os_row["a"], os_row["b"]) == ("DGX OS 7.5", "DGX OS 26.09.2")
    assert os_row["b_source"] == {"kind": "recipe", "file": "docs/setup.md", "commit": "cff464c6",
                                  "note": os_row["b_source"]["note"]}
    assert (differences["nccl.library.provided_by"]["a"], differences["nccl.library.provided_by"]["b"]) == (
        "package", "image")
    assert differences["nccl.shapes.ring4.extra.NCCL_ALGO"]["b"] == "Ring"
    assert differences["nccl.shapes.ring4.extra.NCCL_ALGO"]["a"] is None
    assert differences["nccl.shapes.triangle3.max_nchannels"]["b"] == 8
    assert differences["nccl.shapes.ring4.extra.NCCL_SWITCHLESS_BIDIRECTIONAL"]["b_source"]["file"] == (
        "config/cluster-tp4.json")
    # the site on the same release: no OS difference at all
    common = site_copy / "baselines" / "spark-common.yaml"
    common.write_text(common.read_text().replace("  release: DGX OS 7.5", "  release: DGX OS 26.09.2"))
    same = {d["path"] for d in compare_json(site_copy, capsys)["differences"]}
    assert not [path for path in same if path.startswith("os.")]
    assert "nccl.shapes.ring4.extra.NCCL_ALGO" in same
