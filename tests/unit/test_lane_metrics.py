"""A lane's own metrics endpoints: which URL each node has, scrapes, key figures, and how
`triggers` and `lane status` use them (the network is faked; e2e scrapes the lab's lane)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from sparkbase.cli import triggers as triggers_cli
from sparkbase.cli.main import main
from sparkbase.gate import lane_metrics
from sparkbase.gate.lane_metrics import (
    LaneMetricsError,
    MetricsTarget,
    NodeScrape,
    endpoint_url,
    is_loopback,
    key_figures,
    labelled,
    lane_targets,
    scrape_all,
    scrape_one,
    wanted_metrics,
)
from sparkbase.gate.metrics import MetricsError, Sample, parse_scrapes
from sparkbase.gate.triggers import UNKNOWN, MetricsSource, evaluate
from sparkbase.model.site import Site, load_site
from sparkbase.transport.client import Endpoint, resolve
from sparkbase.transport.targets import SshTarget

REPO = Path(__file__).parents[2]
LANE = "dsv41-flash"
NODES = ["spark1", "spark2", "spark3", "spark4"]
SGLANG_LABELS = 'engine_type="unified",model_name="deepseek-v4.1-flash",pp_rank="0",tp_rank="0"'


def sglang(running: int, used_tokens: int, labels: str = SGLANG_LABELS) -> str:
    """SGLang's two gauges the trigger reads, as its /metrics writes them."""
    return (f"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{{{labels}}} {float(running)}\n"
            f"# TYPE sglang:num_used_tokens gauge\nsglang:num_used_tokens{{{labels}}} {float(used_tokens)}\n")


VLLM = ('vllm:num_requests_running{engine="0",model_name="glm"} 5.0\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="glm"} 0.72\n'
        'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="187500"} 1.0\n')


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(REPO)


def targets(site: Site) -> dict[str, SshTarget]:
    return {node: SshTarget(node=node, alias=site.inventory.nodes[node].ssh_host, config_file=None,
                            known_hosts=Path("/nonexistent"), user="ops", sudo=True, connect_timeout=5.0)
            for node in site.inventory.nodes}


def fake_resolve(addresses: dict[str, tuple[str, int]]) -> Callable[[SshTarget], Endpoint]:
    def resolve_alias(target: SshTarget) -> Endpoint:
        host, port = addresses[target.node]
        return Endpoint(hostname=host, port=port, user="ops", key_files=())
    return resolve_alias


@pytest.mark.parametrize(("host", "port", "path", "url"), [
    ("10.0.0.1", 30000, "/metrics", "http://10.0.0.1:30000/metrics"),
    ("spark1.example", 8000, "/v1/metrics", "http://spark1.example:8000/v1/metrics"),
    ("fd00::1", 8000, "/metrics", "http://[fd00::1]:8000/metrics"),
])
def test_endpoint_url(host: str, port: int, path: str, url: str) -> None:
    assert endpoint_url(host, port, path) == url


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.3.2.1", True), ("10.0.0.1", False), ("localhost", False),
    ("::1", False), ("128.0.0.1", False), ("", False),
])
def test_only_ipv4_loopback_addresses_are_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_real_fleet_endpoints_are_each_nodes_ssh_address_and_the_lanes_port(site: Site) -> None:
    addresses = {node: (f"10.0.0.{i}", 22) for i, node in enumerate(NODES, start=1)}
    found = lane_targets(site, LANE, targets(site), lab=False, resolve=fake_resolve(addresses))
    assert [(t.node, t.url) for t in found] == [
        (node, f"http://10.0.0.{i}:30000/metrics") for i, node in enumerate(NODES, start=1)
    ]


def test_real_fleet_endpoint_resolves_the_alias_through_the_ssh_config(site: Site, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("".join(f"Host {site.inventory.nodes[n].ssh_host}\n  HostName 192.0.2.{i}\n"
                              "  Port 2222\n" for i, n in enumerate(NODES, start=1)))
    ssh = {n: SshTarget(node=n, alias=site.inventory.nodes[n].ssh_host, config_file=config,
                        known_hosts=tmp_path / "known_hosts", user="ops", sudo=True, connect_timeout=5.0)
           for n in NODES}
    found = lane_targets(site, "glm-fp8", ssh, lab=False, resolve=resolve)
    assert found[2] == MetricsTarget("spark3", "http://192.0.2.3:8000/metrics")  # the lane's port, not SSH's


def test_only_the_nodes_the_endpoint_names_are_asked(site: Site) -> None:
    """An engine whose API server runs on its head node only (vLLM across nodes)."""
    lane = site.lanes["glm-fp8"]
    assert lane.runtime is not None and lane.runtime.metrics is not None
    head_only = lane.runtime.metrics.model_copy(update={"nodes": ["spark1"]})
    runtime = lane.runtime.model_copy(update={"metrics": head_only})
    moved = replace(site, lanes=site.lanes | {"glm-fp8": lane.model_copy(update={"runtime": runtime})})
    addresses = {node: (f"10.0.0.{i}", 22) for i, node in enumerate(NODES, start=1)}
    found = lane_targets(moved, "glm-fp8", targets(site), lab=False, resolve=fake_resolve(addresses))
    assert found == [MetricsTarget("spark1", "http://10.0.0.1:8000/metrics")]


@pytest.mark.parametrize(("nodes", "error"), [
    (["spark1"], None),
    (["spark4", "spark2"], None),
    (["spark9"], "runtime.metrics.nodes: spark9 not among the lane's nodes (spark1, spark2, spark3, spark4)"),
    (["spark2", "spark2"], "runtime.metrics.nodes: a node is named twice"),
    ([], "at least 1 item"),
])
def test_endpoint_nodes_are_the_lanes_own(site: Site, nodes: list[str], error: str | None) -> None:
    from pydantic import ValidationError

    from sparkbase.model.lanes import Lane

    data = site.lanes["glm-fp8"].model_dump(exclude_unset=True)
    data["runtime"]["metrics"]["nodes"] = nodes
    if error is None:
        assert Lane.model_validate(data).runtime is not None
        return
    with pytest.raises(ValidationError, match=re.escape(error)):
        Lane.model_validate(data)


def test_lab_endpoints_are_the_stand_ins_loopback_ports(site: Site) -> None:
    addresses = {node: ("127.0.0.1", 2001 + i) for i, node in enumerate(NODES)}
    found = lane_targets(site, LANE, targets(site), lab=True, resolve=fake_resolve(addresses))
    assert [t.url for t in found] == [f"http://127.0.0.1:{2401 + i}/metrics" for i in range(4)]


def test_lab_never_asks_an_address_outside_loopback(site: Site) -> None:
    addresses = {node: ("127.0.0.1", 2001) for node in NODES} | {"spark2": ("10.1.2.3", 22)}
    found = lane_targets(site, LANE, targets(site), lab=True, resolve=fake_resolve(addresses))
    refused = [t for t in found if not t.url]
    assert [(t.node, t.refused) for t in refused] == [
        ("spark2", "lab address 10.1.2.3 is not loopback; not asked")
    ]
    asked: list[str] = []

    def fetch(url: str) -> str:
        asked.append(url)
        return ""
    scrapes = scrape_all(found, wanted_metrics(site), 0.0, fetch=fetch)
    assert len(asked) == 3 and not any("10.1.2.3" in url for url in asked)
    assert [s.node for s in scrapes if not s.scraped] == ["spark2"]


def test_a_node_missing_from_the_inventory_is_named(site: Site) -> None:
    addresses = {node: ("10.0.0.9", 22) for node in NODES}
    partial = {n: t for n, t in targets(site).items() if n != "spark4"}
    found = lane_targets(site, LANE, partial, lab=False, resolve=fake_resolve(addresses))
    assert found[3] == MetricsTarget("spark4", "", "not in the inventory")


def test_a_lane_without_an_endpoint_says_where_to_name_one(site: Site) -> None:
    lane = site.lanes[LANE]
    assert lane.runtime is not None
    runtime = lane.runtime.model_copy(update={"metrics": None})
    bare = site.lanes | {LANE: lane.model_copy(update={"runtime": runtime})}
    with pytest.raises(LaneMetricsError, match=r"lanes/dsv41-flash.yaml runtime.metrics"):
        lane_targets(replace(site, lanes=bare), LANE, targets(site), lab=False)


def test_each_nodes_samples_are_their_own_instance() -> None:
    samples = [Sample("m", {"a": "1"}, 1.0, 0.0), Sample("m", {"instance": "engine-7"}, 2.0, 0.0)]
    assert [s.labels for s in labelled(samples, "spark2")] == [
        {"a": "1", "instance": "spark2"},
        {"exported_instance": "engine-7", "instance": "spark2"},
    ]


def test_scrape_one_reports_why_not() -> None:
    def refused(url: str) -> str:
        raise MetricsError(f"{url}: cannot fetch: [Errno 111] Connection refused")
    scrape = scrape_one(MetricsTarget("spark1", "http://127.0.0.1:1/metrics"), {"m"}, 0.0, fetch=refused)
    assert scrape.error == "cannot fetch: [Errno 111] Connection refused"  # the URL is said once
    garbled = scrape_one(MetricsTarget("spark1", "http://127.0.0.1:1/metrics"), {"m"}, 0.0,
                         fetch=lambda _url: "not a sample line\n")
    assert garbled.error == "http://127.0.0.1:1/metrics:1: not Prometheus text " \
                            "(a sample line reads `metric{label=\"value\"} VALUE [TIMESTAMP_MS]`)"
    unlisted = scrape_one(MetricsTarget("spark1", "", "not in the inventory"), {"m"}, 0.0)
    assert unlisted.error == "not in the inventory"


@pytest.mark.parametrize(("text", "figures"), [
    (sglang(0, 0), "sglang: running requests 0, KV-cache tokens in use 0, sessions of ≥500000 tokens 0"),
    (sglang(6, 2_150_000),
     "sglang: running requests 6, KV-cache tokens in use 2,150,000, sessions of ≥500000 tokens 4"),
    (VLLM, "vllm: running requests 5, KV-cache tokens in use 2,160,000, sessions of ≥500000 tokens 4"),
    ('vllm:num_requests_running{engine="0"} 2.0\n',
     "vllm: running requests 2, KV-cache tokens in use unknown, sessions of ≥500000 tokens unknown"),
    ("node_load1 0.5\n", "no sglang:num_running_reqs or vllm:num_requests_running in the scrape"),
])
def test_key_figures_are_what_trigger_2_reads(site: Site, text: str, figures: str) -> None:
    trigger = next(t for t in site.rules.triggers if t.kind == "session-load")
    assert key_figures(trigger, parse_scrapes(text, 0.0)) == figures


def node_scrape(node: str, text: str | None) -> NodeScrape:
    url = f"http://127.0.0.1:9/{node}"
    if text is None:
        return NodeScrape(node, url, error=f"{url}: cannot fetch: Connection refused")
    return NodeScrape(node, url, tuple(labelled(parse_scrapes(text, 100.0), node)))


SCRAPES = [  # what each node answers (None: refused) -> what the one scrape of the lane holds
    ("quiet everywhere", [sglang(1, 10_000)] * 4, "none"),
    ("sessions summed over nodes: two and two", [sglang(2, 1_000_000)] * 2 + [None, None], "one"),
    ("one node unread", [sglang(1, 10_000)] * 3 + [None], "none"),
    ("one node unread, the rest already over", [sglang(6, 2_150_000), None, None, None], "one"),
    ("nothing read", [None] * 4, None),
]


@pytest.mark.parametrize(("about", "answers", "seen"), SCRAPES, ids=[case[0] for case in SCRAPES])
def test_verdict_from_the_lanes_endpoints(site: Site, about: str, answers: list[str | None],
                                          seen: str | None) -> None:
    """One scrape of the lane is a snapshot: never fired nor quiet, whatever it holds; it says
    whether the scrape was over the line, and accounts for every node."""
    scrapes = [node_scrape(node, answer) for node, answer in zip(NODES, answers, strict=True)]
    source = MetricsSource(
        lines=tuple(lane_metrics.source_lines(LANE, Path("/p/.env"), scrapes)),
        missing=tuple(s.node for s in scrapes if not s.scraped),
    )
    samples = [sample for s in scrapes for sample in s.samples]
    verdict = next(v for v in evaluate(site, samples, None, source) if v.kind == "session-load")
    assert verdict.status == UNKNOWN, verdict.evidence
    if seen is not None:
        assert verdict.evidence[0].startswith(f"snapshot, not sustained: 1 sample time in the 60-minute "
                                              f"window ({seen} with more than 3 sessions"), verdict.evidence
    assert any(line.startswith(f"metrics source: the active lane {LANE} (from /p/.env)")
               for line in verdict.evidence)
    assert sum(line.startswith("spark") for line in verdict.evidence) == 4  # every node accounted for
    if source.missing:
        assert any(line.startswith("not read: ") for line in verdict.evidence)


@pytest.fixture
def scraped(monkeypatch: pytest.MonkeyPatch) -> list[NodeScrape]:
    """What the lane's endpoints answer: tests fill the list; `scrape_lane` returns it."""
    answers: list[NodeScrape] = []
    monkeypatch.setattr(triggers_cli, "scrape_lane", lambda site, lane, lab, at: list(answers))
    return answers


def env_file(tmp_path: Path, lane: str) -> Path:
    path = tmp_path / "proxy.env"
    path.write_text(f"LISTEN=127.0.0.1:8080\nSERVING_LANE={lane}\n")
    return path


def test_triggers_without_metrics_scrape_the_active_lane(tmp_path: Path, scraped: list[NodeScrape],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    scraped += [node_scrape(n, sglang(6, 2_150_000) if n == "spark1" else sglang(0, 0)) for n in NODES]
    env = env_file(tmp_path, LANE)
    assert main(["triggers", "--site", str(REPO), "--env-file", str(env)]) == 4  # a snapshot
    out = capsys.readouterr().out
    assert "evidence: snapshot, not sustained: 1 sample time in the 60-minute window (one with" in out
    assert f"evidence: metrics source: the active lane {LANE} (from {env})" in out
    assert "evidence: spark1: scraped http://127.0.0.1:9/spark1 (2 sample(s) read)" in out
    scraped[3] = node_scrape("spark4", None)
    scraped[0] = node_scrape("spark1", sglang(1, 1000))
    assert main(["triggers", "--site", str(REPO), "--env-file", str(env)]) == 4
    out = capsys.readouterr().out
    assert "spark4: not scraped http://127.0.0.1:9/spark4" in out and "not read: spark4" in out


def test_metrics_given_win_over_the_lanes_endpoints(tmp_path: Path, scraped: list[NodeScrape],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    scraped += [node_scrape(n, None) for n in NODES]  # would be unknown, were they read
    two = REPO / "tests" / "fixtures" / "metrics" / "two-500k-sessions.prom"
    assert main(["triggers", "--site", str(REPO), "--env-file", str(env_file(tmp_path, LANE)),
                 "--metrics", str(two)]) == 0
    assert f"evidence: metrics source: --metrics {two}" in capsys.readouterr().out


@pytest.mark.parametrize(("lane", "why"), [
    ("no-such-lane", "the active lane no-such-lane from"),
    (None, "active lane unknown"),
])
def test_triggers_say_why_no_lane_was_scraped(tmp_path: Path, scraped: list[NodeScrape],
                                             capsys: pytest.CaptureFixture[str], lane: str | None,
                                             why: str) -> None:
    env = env_file(tmp_path, lane) if lane else tmp_path / "missing.env"
    assert main(["triggers", "--site", str(REPO), "--env-file", str(env)]) == 4
    out = capsys.readouterr().out
    assert "evidence: metrics source: none (no --metrics" in out and why in out
    assert "no metrics given" in out


def test_an_unresolvable_node_is_named_not_a_crash(site: Site) -> None:
    def broken(target: SshTarget) -> Endpoint:
        raise ValueError("bad ssh_config line")
    found = lane_targets(site, LANE, targets(site), lab=False, resolve=broken)
    alias = site.inventory.nodes["spark1"].ssh_host
    assert found[0] == MetricsTarget("spark1", "", f"cannot resolve {alias}: ValueError")
    assert not [t for t in found if t.url]
