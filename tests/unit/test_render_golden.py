"""Rendered files for the shipped site, byte for byte, and rendering's determinism.

The golden tree `tests/golden/<node>/...` is what `sparkbase render --out tests/golden`
writes for the shipped site. After an intended change, regenerate it with

    .venv/bin/pytest tests/unit/test_render_golden.py --update-golden

and review the diff like any other change.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from sparkbase.cli.main import main
from sparkbase.model.site import load_site
from sparkbase.render import node_files

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` (relative path -> bytes)."""
    return {
        str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()
    }


def render_to(site: Path, out: Path) -> None:
    assert main(["render", "--site", str(site), "--out", str(out)]) == 0


def test_golden(shipped_site: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    out = tmp_path / "out"
    render_to(shipped_site, out)
    if request.config.getoption("--update-golden"):
        shutil.rmtree(GOLDEN, ignore_errors=True)
        shutil.copytree(out, GOLDEN)
    rendered, golden = tree(out), tree(GOLDEN)
    assert sorted(rendered) == sorted(golden)
    for relative, content in rendered.items():
        assert content == golden[relative], f"{relative} differs from tests/golden/{relative}"


def test_golden_covers_every_node_and_file(shipped_site: Path) -> None:
    site = load_site(shipped_site)
    golden = tree(GOLDEN)
    for node in site.inventory.nodes:
        for file in node_files(site, node):
            assert f"{node}{file.path}" in golden


def test_modes_are_as_rendered(shipped_site: Path, tmp_path: Path) -> None:
    render_to(shipped_site, tmp_path)
    site = load_site(shipped_site)
    for file in node_files(site, "spark1"):
        written = tmp_path / "spark1" / file.path.lstrip("/")
        assert stat.S_IMODE(written.stat().st_mode) == file.mode
    assert stat.S_IMODE((tmp_path / "spark1/etc/netplan/60-sparkbase-fabric.yaml").stat().st_mode) == 0o600


def test_render_twice_and_elsewhere_is_identical(
    shipped_site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    render_to(shipped_site, tmp_path / "a")
    first = tree(tmp_path / "a")
    render_to(shipped_site, tmp_path / "a")  # over the previous render
    assert tree(tmp_path / "a") == first
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    render_to(shipped_site, Path("b"))  # relative --out, another working directory
    assert tree(elsewhere / "b") == first


def test_rerender_drops_files_no_longer_rendered(shipped_site: Path, tmp_path: Path) -> None:
    render_to(shipped_site, tmp_path)
    stale = tmp_path / "spark1" / "etc" / "left-over.conf"
    stale.write_text("old\n")
    render_to(shipped_site, tmp_path)
    assert not stale.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_refuses_to_replace_a_directory_that_is_not_a_render(shipped_site: Path, tmp_path: Path) -> None:
    precious = tmp_path / "spark1" / "notes.txt"
    precious.parent.mkdir()
    precious.write_text("mine\n")
    assert main(["render", "spark1", "--site", str(shipped_site), "--out", str(tmp_path)]) == 2
    assert precious.read_text() == "mine\n"


def test_unknown_node_is_refused_and_nothing_written(shipped_site: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["render", "spark1", "spark9", "--site", str(shipped_site), "--out", str(out)]) == 2
    assert not out.exists()


def test_selected_nodes_only(shipped_site: Path, tmp_path: Path) -> None:
    assert main(["render", "spark3", "--site", str(shipped_site), "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spark3"]


def test_fstab_line_is_written_as_a_fragment(site_copy: Path, tmp_path: Path) -> None:
    baseline = site_copy / "baselines" / "site-stock-6.17-4k.yaml"
    text = baseline.read_text().replace(
        "  transparent_hugepages: madvise\n",
        "  transparent_hugepages: madvise\n  swap: {path: /swapfile, size_gib: 16, header_page_size: 4096}\n",
    )
    baseline.write_text(text)
    out = tmp_path / "out"
    assert main(["render", "spark2", "--site", str(site_copy), "--out", str(out)]) == 0
    fragment = out / "spark2" / "etc" / "fstab.sparkbase-managed"
    assert fragment.read_text() == "/swapfile none swap sw 0 0\n"
    assert not (out / "spark2" / "etc" / "fstab").exists()  # never the whole shared file


def test_netplan_carries_this_nodes_paths(shipped_site: Path, tmp_path: Path) -> None:
    render_to(shipped_site, tmp_path)
    netplan = (tmp_path / "spark3/etc/netplan/60-sparkbase-fabric.yaml").read_text()
    # spark3 (rank 2): port 0 to spark4, port 1 back to spark2; one /24 per path
    for address in ("10.34.1.3/24", "10.34.2.3/24", "10.23.1.3/24", "10.23.2.3/24"):
        assert f"addresses: [{address}]" in netplan
    assert "# path to spark4 enP2p1s0f1np1, subnet 10.34.2.0/24" in netplan
    assert "10.12." not in netplan and "10.14." not in netplan
    assert os.path.getsize(tmp_path / "spark3/etc/nccl.conf") > 0


def test_a_nodes_own_gid_index_renders_into_its_nccl_conf_only(site_copy: Path, tmp_path: Path) -> None:
    inventory = site_copy / "inventory" / "site.yaml"
    inventory.write_text(inventory.read_text().replace(
        "    rank: 1\n", "    rank: 1\n    gid_index: 5\n"
    ))
    render_to(site_copy, tmp_path / "out")
    spark2 = (tmp_path / "out/spark2/etc/nccl.conf").read_text()
    assert "NCCL_IB_GID_INDEX=5\n" in spark2
    assert "this node's own" in spark2
    for node in ("spark1", "spark3", "spark4"):
        rendered = (tmp_path / "out" / node / "etc/nccl.conf").read_bytes()
        assert rendered == (GOLDEN / node / "etc/nccl.conf").read_bytes()


# --- all or nothing across nodes ------------------------------------------------------


def test_a_foreign_directory_for_one_node_writes_no_node(shipped_site: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    precious = out / "spark3" / "notes.txt"
    precious.parent.mkdir(parents=True)
    precious.write_text("mine\n")
    assert main(["render", "--site", str(shipped_site), "--out", str(out)]) == 2
    assert sorted(p.name for p in out.iterdir()) == ["spark3"]  # no spark1/2/4, no staging
    assert precious.read_text() == "mine\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_refused_render_leaves_the_previous_one_whole(site_copy: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    render_to(site_copy, out)
    before = tree(out)
    common = site_copy / "baselines" / "spark-common.yaml"
    common.write_text(common.read_text().replace("  mtu: 9000\n", "  mtu: 4200\n"))
    shutil.rmtree(out / "spark4")
    (out / "spark4").mkdir()
    (out / "spark4" / "notes.txt").write_text("mine\n")
    assert main(["render", "--site", str(site_copy), "--out", str(out)]) == 2
    after = tree(out)
    assert {k: v for k, v in after.items() if not k.startswith("spark4/")} == {
        k: v for k, v in before.items() if not k.startswith("spark4/")
    }


def test_a_node_that_cannot_be_rendered_writes_no_node(
    shipped_site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sparkbase.release

    def failing(site: object, node: str) -> object:
        if node == "spark3":
            raise ValueError("refusing to write rendered path '/x/../y'")
        return node_files(site, node)  # type: ignore[arg-type]

    monkeypatch.setattr(sparkbase.release, "node_files", failing)
    out = tmp_path / "out"
    assert main(["render", "--site", str(shipped_site), "--out", str(out)]) == 2
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_out_that_is_a_file_is_refused(shipped_site: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.write_text("mine\n")
    assert main(["render", "--site", str(shipped_site), "--out", str(out)]) == 2
    assert out.read_text() == "mine\n"


def test_a_failed_swap_puts_every_previous_tree_back(
    site_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    render_to(site_copy, out)
    before = tree(out)
    common = site_copy / "baselines" / "spark-common.yaml"
    common.write_text(common.read_text().replace("  mtu: 9000\n", "  mtu: 4200\n"))
    real_replace = os.replace
    failures = [OSError(28, "No space left on device")]  # the first move into spark3 fails

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst) == out / "spark3" and failures:
            raise failures.pop()
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    assert main(["render", "--site", str(site_copy), "--out", str(out)]) == 2
    monkeypatch.undo()
    assert tree(out) == before
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
