"""Provenance: every shipped value carries its source, and the recipe values are pinned
with theirs (docs/sources/ds41f-research.md is the research record each row comes from)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkbase.cli.main import main
from sparkbase.model.baseline import Baseline
from sparkbase.model.coverage import unconfirmed
from sparkbase.model.driver import DriverSpec
from sparkbase.model.kernel import KernelSpec
from sparkbase.model.provenance import PlaceholderSource, RecipeSource, covering_key, merge_sources, source_of
from sparkbase.model.site import Site, load_site

VARIANT, STOCK_PAGES, SITE = "ds41f-7x-64k", "ds41f-stock-pages-262k", "site-stock-6.17-4k"

#: (baseline, field, value, recipe file, commit): the recipe's values and where it writes them
RECIPE_VALUES: list[tuple[str, str, Any, str, str]] = [
    (VARIANT, "kernel.release", "7.0.0-1019-nvidia-64k", "config/cluster-64k.json", "6a70c129"),
    (VARIANT, "kernel.page_size", 65536, "config/cluster-64k.json", "6a70c129"),
    (VARIANT, "kernel.package_version", "7.0.0-1019.19~24.04.2", "config/kernel-trial.json", "f2089eda"),
    (VARIANT, "kernel.cmdline_add", ["kho=off"], "docs/setup.md", "cff464c6"),
    (VARIANT, "kernel.cmdline_forbid", ["splash"], "host/recovery/README.md", "052248c1"),
    (VARIANT, "driver.version", "580.178.04", "config/kernel-trial.json", "f2089eda"),
    (
        VARIANT,
        "driver.package_version",
        "580.178.04-0ubuntu0.24.04.1",
        "experiments/2026-10-02-driver-cuda-refresh/runs/packages.json",
        "583b4eda",
    ),
    (VARIANT, "nccl.settings.ib_merge_nics", 1, "config/cluster-tp4.json", "a20d52a2"),
    (VARIANT, "os.release", "DGX OS 26.09.2", "docs/setup.md", "cff464c6"),
    (VARIANT, "nccl.library.provided_by", "image", "upstreams.lock.json", "03249520"),
    (VARIANT, "nccl.library.version", "2.30.7", "upstreams.lock.json", "03249520"),
    (VARIANT, "nccl.settings.ib_hca", ["rocep1s0f0", "roceP2p1s0f0", "rocep1s0f1", "roceP2p1s0f1"],
     "config/cluster-tp4.json", "a20d52a2"),
    (VARIANT, "nccl.shapes.ring4.extra.NCCL_ALGO", "Ring", "config/cluster-tp4.json", "a20d52a2"),
    (VARIANT, "nccl.shapes.ring4.extra.NCCL_IB_SUBNET_PREFIX_LEN", "24",
     "config/cluster-tp4.json", "a20d52a2"),
    (VARIANT, "nccl.shapes.triangle3.max_nchannels", 8, "config/cluster-4k.json", "6a70c129"),
    (STOCK_PAGES, "nccl.shapes.ring4", None, "config/cluster-4k.json", "6a70c129"),
    (VARIANT, "memory.display_carveout", True, "config/cluster-64k.json", "6a70c129"),
    (VARIANT, "shapes.0.transport", "oneshot-ring4", "config/cluster-tp4.json", "a20d52a2"),
    (VARIANT, "shapes.1.transport", "oneshot-direct", "config/cluster-64k.json", "6a70c129"),
    (STOCK_PAGES, "kernel.release", "7.0.0-1019-nvidia", "config/cluster-4k.json", "6a70c129"),
    (STOCK_PAGES, "kernel.page_size", 4096, "config/cluster-4k.json", "6a70c129"),
    (
        STOCK_PAGES,
        "kernel.package_version",
        "7.0.0-1019.19~24.04.2",
        "experiments/2026-10-02-driver-cuda-refresh/runs/packages.json",
        "583b4eda",
    ),
    (STOCK_PAGES, "kernel.cmdline_add", ["kho=off"], "docs/setup.md", "cff464c6"),
    (STOCK_PAGES, "kernel.cmdline_forbid", ["splash"], "host/recovery/README.md", "052248c1"),
    (STOCK_PAGES, "memory.memory_saver", None, "config/cluster-4k.json", "6a70c129"),
    (STOCK_PAGES, "memory.swap", None, "host/kernel-memory/spark3-kernel-memory", "db98392f"),
    (STOCK_PAGES, "memory.transparent_hugepages", "madvise", "host/kernel-memory/README.md", "db98392f"),
    (STOCK_PAGES, "memory.sysctls.vm.min_free_kbytes", "45166", "host/kernel-memory/README.md", "db98392f"),
    (STOCK_PAGES, "shapes.0.name", "triangle3", "config/cluster-4k.json", "6a70c129"),
    (STOCK_PAGES, "shapes.0.transport", "oneshot-direct", "config/cluster-4k.json", "6a70c129"),
    (
        SITE,
        "kernel.package_version",
        "6.17.0-1032.32",
        "experiments/2026-10-02-driver-cuda-refresh/runs/packages.json",
        "583b4eda",
    ),
]

#: values in no source: each must be a placeholder in the shipped site
PLACEHOLDER_VALUES: list[tuple[str, str]] = [
    (SITE, "driver.version"),
    (SITE, "driver.package_version"),
    (SITE, "nccl.library.sha256"),
    (SITE, "memory.sysctls.vm.min_free_kbytes"),
    (SITE, "memory.transparent_hugepages"),
    (SITE, "host.display_manager"),
    (SITE, "cpuset.cpus"),
    (SITE, "os.release"),
    (VARIANT, "cpuset.cpus"),
    (VARIANT, "secure_boot.mok_fingerprint"),
]


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(Path(__file__).resolve().parents[2])


def value_at(baseline: Baseline, key: str) -> Any:
    data: Any = baseline.model_dump(mode="json")
    parts = key.split(".")
    if parts[:2] == ["memory", "sysctls"]:
        return data["memory"]["sysctls"].get(".".join(parts[2:]))
    for part in parts:
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


@pytest.mark.parametrize(("name", "key", "value", "file", "commit"), RECIPE_VALUES)
def test_recipe_value_and_its_source(
    site: Site, name: str, key: str, value: Any, file: str, commit: str
) -> None:
    baseline = site.baselines[name]
    assert value_at(baseline, key) == value
    source = source_of(baseline.sources, tuple(key.split(".")))
    assert isinstance(source, RecipeSource), f"{name} {key}: {source}"
    assert (source.file, source.commit) == (file, commit)


@pytest.mark.parametrize(("name", "key"), PLACEHOLDER_VALUES)
def test_value_in_no_source_is_a_placeholder(site: Site, name: str, key: str) -> None:
    source = source_of(site.baselines[name].sources, tuple(key.split(".")))
    assert isinstance(source, PlaceholderSource), f"{name} {key}: {source}"
    assert source.note


def test_every_shipped_value_has_a_source(site: Site) -> None:
    for name, baseline in site.baselines.items():
        assert [
            item for item in unconfirmed(name, baseline) if item.note.startswith("no source recorded")
        ] == []


def test_package_pins_have_real_forms(site: Site) -> None:
    pins = {pin.name: pin.version for pin in site.baselines[VARIANT].packages()}
    assert pins["linux-image-7.0.0-1019-nvidia-64k"] == "7.0.0-1019.19~24.04.2"
    assert pins["linux-modules-nvidia-580-open-7.0.0-1019-nvidia-64k"] == "7.0.0-1019.19~24.04.2+1"
    assert pins["nvidia-utils-580"] == "580.178.04-0ubuntu0.24.04.1"
    site_pins = {pin.name: pin.version for pin in site.baselines[SITE].packages()}
    assert site_pins["linux-modules-nvidia-580-open-6.17.0-1032-nvidia"] == "6.17.0-1032.32+1"
    stock = {pin.name: pin.version for pin in site.baselines[STOCK_PAGES].packages()}
    assert stock["linux-modules-nvidia-580-open-7.0.0-1019-nvidia"] == "7.0.0-1019.19~24.04.2+1"


def test_kmod_version_follows_the_kernel_package() -> None:
    kernel = KernelSpec(release="6.17.0-1032-nvidia", package_version="6.17.0-1032.32", page_size=4096)
    driver = DriverSpec(version="580.95.05", package_version="580.95.05-0ubuntu0.24.04.2")
    assert [(p.name, p.version) for p in driver.packages(kernel)] == [
        ("nvidia-utils-580", "580.95.05-0ubuntu0.24.04.2"),
        ("linux-modules-nvidia-580-open-6.17.0-1032-nvidia", "6.17.0-1032.32+1"),
    ]


@pytest.mark.parametrize(
    ("keys", "field", "expected"),
    [
        (["kernel", "kernel.release"], "kernel.release", "kernel.release"),
        (["kernel", "kernel.release"], "kernel.page_size", "kernel"),
        (["kernel"], "kernelx.page_size", None),
        (["memory.sysctls"], "memory.sysctls.vm.min_free_kbytes", "memory.sysctls"),
        (["shapes.0", "shapes"], "shapes.0.transport", "shapes.0"),
        (["shapes.1"], "shapes.10.name", None),
        ([], "kernel", None),
    ],
)
def test_most_specific_key_covers(keys: list[str], field: str, expected: str | None) -> None:
    assert covering_key(keys, field) == expected


@pytest.mark.parametrize(
    ("inherited", "own", "merged"),
    [
        ({"kernel.release": 1, "driver": 2}, {"kernel": 3}, {"driver": 2, "kernel": 3}),
        ({"kernel": 1}, {"kernel.release": 2}, {"kernel": 1, "kernel.release": 2}),
        ({"shapes.0": 1, "shapes.1": 2}, {"shapes": 3}, {"shapes": 3}),
        ({"kernel": 1}, None, None),
        (None, {"kernel": 1}, {"kernel": 1}),
    ],
)
def test_a_files_entry_replaces_inherited_ones_under_it(inherited: Any, own: Any, merged: Any) -> None:
    assert merge_sources(inherited, own) == merged


def validate(site: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["validate", "--site", str(site)])
    return code, capsys.readouterr().out


def replace(site: Path, name: str, old: str, new: str) -> None:
    path = site / "baselines" / f"{name}.yaml"
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def test_each_placeholder_warns_once_at_its_entry(
    shipped_site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = validate(shipped_site, capsys)
    assert code == 0
    lines = [line for line in out.splitlines() if "sources.os.release: placeholder:" in line]
    assert len(lines) == 1  # spark-common's entry, inherited by two baselines, said once
    assert lines[0].startswith("baselines/spark-common.yaml:") or "/baselines/spark-common.yaml:" in lines[0]
    driver = next(line for line in out.splitlines() if "sources.driver: placeholder" in line)
    assert "site-stock-6.17-4k.yaml:48:3: warning:" in driver
    assert "placeholder value(s) to confirm" in out.splitlines()[-1]


def test_validate_json_lists_placeholders(shipped_site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--json", "--site", str(shipped_site)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == 2
    by_key = {(Path(p["file"]).name, p["key"]): p for p in report["placeholders"]}
    driver = by_key[("site-stock-6.17-4k.yaml", "driver")]
    assert driver["line"] == 48 and driver["note"].startswith("site to confirm")
    assert ("spark-common.yaml", "os.release") in by_key
    assert all(set(p) == {"file", "line", "key", "note"} for p in report["placeholders"])
    window = by_key[("site.yaml", "triggers[1].sources.window_minutes")]  # a trigger's, the site's to decide
    assert window["note"].startswith("site to decide") and window["line"] == 69


def test_uncovered_block_warns(site_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    replace(
        site_copy,
        SITE,
        '  shapes: {kind: seed, note: "BRIEF.md: the four-node ring, ring NCCL for every lane"}\n',
        "",
    )
    code, out = validate(site_copy, capsys)
    assert code == 0
    warning = next(line for line in out.splitlines() if "no source recorded for shapes" in line)
    assert "site-stock-6.17-4k.yaml:40:1: warning: shapes:" in warning
    assert main(["lock", "--check", "--allow-placeholders", "--site", str(site_copy)]) == 0
    capsys.readouterr()
    assert main(["lock", "--check", "--site", str(site_copy)]) == 1
    assert "site-stock-6.17-4k: shapes: no source recorded" in capsys.readouterr().err


def test_value_set_over_an_inherited_source_warns(
    site_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replace(
        site_copy,
        STOCK_PAGES,
        "  kernel.release: {kind: recipe, file: config/cluster-4k.json, commit: 6a70c129}\n",
        "",
    )
    code, out = validate(site_copy, capsys)
    assert code == 0
    warning = next(
        line for line in out.splitlines() if "ds41f-stock-pages-262k.yaml:9:" in line and "inherited" in line
    )
    assert (
        "kernel.release: set in this file, but its source (sources 'kernel.release') is inherited "
        "from ds41f-7x-64k.yaml" in warning
    )


def test_lock_check_refuses_placeholders(shipped_site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lock", "--check", "--site", str(shipped_site)]) == 1
    err = capsys.readouterr().err
    assert "site-stock-6.17-4k: driver: placeholder: site to confirm" in err
    assert "--allow-placeholders" in err


def test_lock_check_passes_once_every_value_is_confirmed(
    site_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for file in (site_copy / "baselines").glob("*.yaml"):
        file.write_text(file.read_text().replace("{kind: placeholder, note:", "{kind: site, note:"))
    assert main(["lock", "--check", "--site", str(site_copy)]) == 0
    out = capsys.readouterr().out
    assert "the lock holds for 3 baseline(s)" in out and "allowed" not in out


def test_compare_shows_provenance(shipped_site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", SITE, STOCK_PAGES, "--json", "--site", str(shipped_site)]) == 0
    report = json.loads(capsys.readouterr().out)
    by_path = {d["path"]: d for d in report["differences"]}
    release = by_path["kernel.release"]
    assert release["breaks_contract"] == ["b"]  # stock pages breaks the 6.17 kernel pin
    assert release["a_source"]["kind"] == "seed"
    assert release["b_source"] == {"kind": "recipe", "file": "config/cluster-4k.json", "commit": "6a70c129"}
    assert by_path["driver.version"]["a_source"]["kind"] == "placeholder"
    assert main(["compare", SITE, STOCK_PAGES, "--site", str(shipped_site)]) == 0
    line = next(row for row in capsys.readouterr().out.splitlines() if row.startswith("kernel.release "))
    assert "recipe config/cluster-4k.json@6a70c129" in line and "broken by ds41f-stock-pages-262k" in line


def test_the_lab_repository_serves_every_pinned_version(site: Site) -> None:
    from sparkbase_lab.packages import find

    for baseline in site.baselines.values():
        for pin in baseline.packages():
            find(pin.name, pin.version)  # KeyError names the pin apply would fail on
