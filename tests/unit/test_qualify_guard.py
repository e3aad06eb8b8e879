"""The contamination guard: running requests per node as the triggers count them, other
traffic named by node, an unreadable node, and a stale reading that settles."""

from __future__ import annotations

from sparkbase.gate.lane_metrics import NodeScrape, labelled
from sparkbase.gate.metrics import parse_scrapes
from sparkbase.qualify.guard import TrafficGuard, judge, running_by_node

SGLANG = "sglang:num_running_reqs"
VLLM = "vllm:num_requests_running"


def scrape(node: str, text: str) -> NodeScrape:
    samples = labelled(parse_scrapes(text, 100.0), node)
    return NodeScrape(node, f"http://{node}/metrics", tuple(samples))


def sglang_tp4(running: float) -> list[NodeScrape]:
    """An SGLang TP4 lane: each node's scheduler reports the one batch (tp_rank 0..3)."""
    return [scrape(f"spark{rank + 1}", f'{SGLANG}{{model_name="m",engine_type="unified",tp_rank="{rank}",'
                                         f'pp_rank="0"}} {running}\n') for rank in range(4)]


def test_an_sglang_tp_group_over_four_nodes_is_one_batch() -> None:
    """The batch is counted once, on the node of its lowest rank (gate.triggers' grouping)."""
    assert running_by_node(sglang_tp4(2.0), "sglang", SGLANG) == {"spark1": 2.0, "spark2": 0.0, "spark3": 0.0,
                                                                   "spark4": 0.0}
    assert judge(sglang_tp4(2.0), "sglang", SGLANG).message == "other traffic on spark1: 2 running requests"  # type: ignore[union-attr]
    assert judge(sglang_tp4(0.0), "sglang", SGLANG) is None


def test_vllm_engines_are_summed_per_node() -> None:
    two_engines = f'{VLLM}{{model_name="m",engine="0"}} 1.0\n{VLLM}{{model_name="m",engine="1"}} 0.0\n'
    scrapes = [scrape("spark1", two_engines), scrape("spark2", f'{VLLM}{{model_name="m",engine="0"}} 0.0\n')]
    found = judge(scrapes, "vllm", VLLM)
    assert found is not None and found.message == "other traffic on spark1: 1 running request"


def test_a_node_that_cannot_be_read_invalidates_the_run() -> None:
    down = NodeScrape("spark4", "http://spark4/metrics", error="connection refused")
    scrapes = [*sglang_tp4(0.0)[:3], down]
    found = judge(scrapes, "sglang", SGLANG)
    assert found is not None
    assert found.message == "cannot read the running requests on spark4: connection refused"


def test_a_stale_reading_is_read_again_and_one_that_stays_is_traffic() -> None:
    readings = iter([sglang_tp4(1.0), sglang_tp4(0.0)])
    slept: list[float] = []
    guard = TrafficGuard(lambda: next(readings), "sglang", SGLANG, sleep=slept.append)
    assert guard.check("after run A") is None and slept == [1.0]  # the gate's own request, still shown
    busy = TrafficGuard(lambda: sglang_tp4(2.0), "sglang", SGLANG, sleep=lambda _s: None)
    found = busy.check("during run B, before prompt p2 round 1")
    assert found is not None
    assert found.message == ("other traffic on spark1: 2 running requests (during run B, before prompt p2 "
                             "round 1)")
