"""The gate's view of a site (`gate.view`): the same verdicts as the typed site, kept under
the site's cache key, rebuilt on any change, never trusted for another site."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbase.audit.compiled import compile_node
from sparkbase.audit.expected import expected_for
from sparkbase.audit.runtime import lane_probes
from sparkbase.errors import ConfigError
from sparkbase.gate.refusals import lane_refusals
from sparkbase.gate.view import VIEW_NAME, SiteView, load_view, view_of
from sparkbase.model import cache as site_cache
from sparkbase.model import site as site_module
from sparkbase.model.site import Site, load_site

NODES = ("spark1", "spark2", "spark3", "spark4")


@pytest.fixture(autouse=True)
def _cache_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(site_cache.DISABLE_ENV, raising=False)


def _never_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any load of the typed site fail the test: what follows must come from the view."""

    def refuse(root: Path, inventory: Path | None = None, *, cache: bool = False) -> Site:
        raise AssertionError(f"the site at {root} was loaded again")

    monkeypatch.setattr(site_module, "load_site", refuse)


def test_the_view_says_what_the_typed_site_says(site_copy: Path) -> None:
    site = load_site(site_copy)
    view = view_of(site)
    assert view.site == site.rules.site
    assert view.nodes == NODES
    assert set(view.lanes) == set(site.lanes)
    for name, lane in site.lanes.items():
        kept = view.lanes[name]
        assert (kept.enabled, kept.baseline, kept.nodes) == (lane.enabled, lane.baseline, tuple(lane.nodes))
        assert list(kept.refusals) == lane_refusals(site, name, lane)
        probes = lane_probes(site, [name])
        assert view.probes([name]) == probes
        assert view.expectations(lane.nodes, lane.baseline) == {
            node: compile_node(expected_for(site, node, lane.baseline)) for node in lane.nodes
        }
    assert view.expectations(NODES) == {node: compile_node(expected_for(site, node)) for node in NODES}


def test_an_unchanged_site_is_judged_from_the_kept_view(
    site_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = site_copy.resolve()
    first = load_view(root)
    assert site_cache.derived_file(root, VIEW_NAME).is_file()
    _never_load(monkeypatch)
    again = load_view(root)
    assert again == first


def test_an_edited_lane_is_seen_at_once(site_copy: Path) -> None:
    root = site_copy.resolve()
    assert load_view(root).lanes["glm-fp8"].enabled
    lane_file = root / "lanes" / "glm-fp8.yaml"
    text = lane_file.read_text()
    assert "enabled:" not in text  # enabled by default
    lane_file.write_text(text + "enabled: false\n")
    lane = load_view(root).lanes["glm-fp8"]
    assert not lane.enabled
    assert [r.reason for r in lane.refusals if not r.overridable] == [
        "lane glm-fp8 is disabled (evaluated and rejected by the site)"
    ]


def test_a_broken_site_reports_its_errors_and_never_the_kept_view(site_copy: Path) -> None:
    root = site_copy.resolve()
    load_view(root)
    lane_file = root / "lanes" / "glm-fp8.yaml"
    lane_file.write_text(lane_file.read_text() + "enabled: maybe\n")
    with pytest.raises(ConfigError) as raised:
        load_view(root)
    assert any(p.file == lane_file and p.path == "enabled" for p in raised.value.problems)


def test_a_view_kept_for_another_site_is_not_used(
    site_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = site_copy.resolve()
    load_view(root)
    other = tmp_path / "other"
    other.mkdir()
    key = site_cache.site_key(root, root / "inventory" / "site.yaml", ("baselines", "lanes"))
    # a view stored under this very key but naming another site directory
    stranger = SiteView(other, "stranger", (), load_view(root).reach, {}, {})
    site_cache.store_keyed(root, VIEW_NAME, key, stranger)
    assert load_view(root).site != "stranger"


def test_without_the_cache_every_call_loads_the_site(
    site_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = site_copy.resolve()
    load_view(root)
    monkeypatch.setenv(site_cache.DISABLE_ENV, "1")
    loads: list[Path] = []
    real = site_module.load_site

    def counted(where: Path, inventory: Path | None = None, *, cache: bool = False) -> Site:
        loads.append(where)
        return real(where, inventory, cache=cache)

    monkeypatch.setattr(site_module, "load_site", counted)
    load_view(root)
    load_view(root)
    assert loads == [root, root]


def test_the_lane_that_must_serve_is_required_others_may_idle(site_copy: Path, tmp_path: Path) -> None:
    """Pre-flight requires its lane; the audit requires the proxy's active lane only."""
    view = view_of(load_site(site_copy))
    probes = view.probes(["dsv41-flash", "glm-fp8"], required=["glm-fp8"])
    assert {(p.lane, p.required) for p in probes["spark1"]} == {("dsv41-flash", False), ("glm-fp8", True)}
    assert view.proxy is not None
    lab = tmp_path / "lab"
    lab.mkdir()
    assert view.active_lane(lab) is None  # no .env: no lane is known to be active
    (lab / "proxy.env").write_text(f"LISTEN=127.0.0.1:8080\n{view.proxy[1]}=glm-fp8\n")
    assert view.active_lane(lab) == "glm-fp8"
