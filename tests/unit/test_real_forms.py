"""Forms of real tool and engine output that sparkbase used to misread (issue 24), each
judged from its public sample in tests/fixtures/real/: what the audit and the re-open
triggers make of it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_audit_support import converged_node, shipped

from sparkbase.audit.checks.kernel import cmdline_outcome
from sparkbase.audit.checks.secure_boot import secure_boot_outcome
from sparkbase.audit.registry import Subject
from sparkbase.audit.run import judge_node
from sparkbase.facts.model import DkmsEntry, NodeFacts, SecureBoot
from sparkbase.facts.parsers.kernel import parse_cmdline
from sparkbase.facts.parsers.modules import parse_dkms_status
from sparkbase.facts.parsers.secure_boot import parse_sb_state
from sparkbase.gate.lane_metrics import key_figures
from sparkbase.gate.metrics import parse_scrapes
from sparkbase.gate.triggers import QUIET, UNKNOWN, evaluate
from sparkbase.model.site import Site
from sparkbase.model.site_rules import KernelPinTrigger, SessionLoadTrigger

REAL = Path(__file__).parents[1] / "fixtures" / "real"
SITE = shipped()
VARIANT = "ds41f-7x-64k"
SAVER = "dgx-spark-memory-saver"


def real(name: str) -> str:
    return (REAL / name).read_text()


def _session_trigger(site: Site) -> SessionLoadTrigger:
    return next(t for t in site.rules.triggers if isinstance(t, SessionLoadTrigger))


def _session_verdict(site: Site, text: str) -> tuple[str, list[str]]:
    verdict = next(v for v in evaluate(site, parse_scrapes(text, 1000.0)) if v.kind == "session-load")
    return verdict.status, verdict.evidence


# --- dkms status: a WARNING after the state --------------------------------------------

WARNED = parse_dkms_status(real("dkms_status_-m__installed_WARNING_diff__i915-sriov-dkms-274.txt")).entries[0]


def _saver_warned(facts: NodeFacts) -> NodeFacts:
    """The converged node, its memory saver's DKMS line carrying the real sample's note."""
    return replace(facts, dkms=tuple(replace(e, notes=WARNED.notes) if e.name == SAVER else e
                                     for e in facts.dkms))


def test_a_dkms_warning_is_kept_on_its_entry_and_it_is_not_installed() -> None:
    assert WARNED.status == "installed" and not WARNED.installed
    assert WARNED.notes == ("WARNING! Diff between built and installed module!",)
    harmless = parse_dkms_status(real("dkms_status__dkms2_old_format_original_module__negativo17-56.txt"))
    assert harmless.entries[0].notes == ("original_module exists",) and harmless.entries[0].installed


def test_the_audit_does_not_take_a_warned_dkms_module_for_installed() -> None:
    expected, facts = converged_node(SITE, "spark1", VARIANT)
    results = {r.id: r for r in judge_node(expected, _saver_warned(facts))}
    failed = {i for i, r in results.items() if r.status == "fail"}
    assert failed == {"memory_saver.dkms"}
    dkms = results["memory_saver.dkms"]
    assert "WARNING! Diff between built and installed module!" in str(dkms.observed)
    assert "not the module DKMS built" in str(dkms.observed)
    assert dkms.fix is not None and "dkms install --force" in dkms.fix


def test_every_warned_line_of_a_real_dkms2_status_is_not_installed() -> None:
    sample = "dkms_status__dkms2_WARNING_diff_repeated_per_module__ubuntuforums-rtl8192cu.txt"
    status = parse_dkms_status(real(sample))
    assert [(e.name, e.installed) for e in status.entries] == [
        ("8192cu", True), ("backport-iwlwifi", False), ("rtl8723de", True), ("rtlwifi-new", False),
    ]
    assert status.noise == ()


def test_a_dkms_note_pushed_onto_its_own_line_stays_with_its_entry() -> None:
    pushed = "m/1.0, 6.17.0-1032-nvidia, aarch64: installedDeprecated feature: REMAKE_INITRD\n" \
             " (WARNING! Diff between built and installed module!)\n"
    status = parse_dkms_status(pushed)
    assert status.entries[0].shown == "installed (WARNING! Diff between built and installed module!)"
    assert not status.entries[0].installed
    assert status.noise == ("Deprecated feature: REMAKE_INITRD",)


def test_capture_does_not_take_a_warned_module_for_the_installed_version() -> None:
    from sparkbase.capture.core import dkms_version as _dkms_version

    facts = NodeFacts(node="spark1", kernel_release="6.17.0-1032-nvidia", dkms=(
        DkmsEntry("m", "1.0", "6.17.0-1032-nvidia", "aarch64", "installed", WARNED.notes),))
    assert _dkms_version(facts, "m") is None


# --- /proc/cmdline: double quotes -------------------------------------------------------

QUOTED = real("proc_cmdline__quoted_acpi_osi_Windows_2016__lenovo-e495-lkml.txt")


def test_a_quoted_argument_with_a_space_is_one_argument() -> None:
    args = parse_cmdline(QUOTED)
    assert "acpi_osi=Windows 2016" in args and len(args) == 7
    assert not any('"' in arg for arg in args)


def test_a_forbidden_parameter_in_quotes_does_not_escape_the_audit() -> None:
    """Split on spaces, the real line gives `"acpi_osi=Windows` and `2016"`: neither names
    acpi_osi, so a baseline forbidding it passed."""
    facts = NodeFacts(node="spark1", cmdline=parse_cmdline(QUOTED))
    outcome = cmdline_outcome(("ro",), ("acpi_osi",), facts, Subject("spark1"))
    assert outcome.status == "fail"
    assert outcome.observed == "forbidden acpi_osi=!; forbidden acpi_osi=Windows 2016"


CMDLINE_CASES = [
    # (the kernel's own quoting, lib/cmdline.c next_arg: text -> arguments)
    ('quiet acpi_osi="Windows 2016" ro\n', ("quiet", "acpi_osi=Windows 2016", "ro")),
    ('"acpi_osi=Windows 2016" ro', ("acpi_osi=Windows 2016", "ro")),
    ('dyndbg="file drivers/x.c +p"  nosplash', ("dyndbg=file drivers/x.c +p", "nosplash")),
    ('a=b"c d"e f', ('a=b"c d"e', "f")),  # a quote inside a value stays, and still groups
    ('"no value here" x', ("no value here", "x")),
    ('name= x', ("name=", "x")),
    ('unterminated="a b', ("unterminated=a b",)),
    ('\t  spaced \n', ("spaced",)),
]


@pytest.mark.parametrize(("text", "args"), CMDLINE_CASES, ids=[c[0] for c in CMDLINE_CASES])
def test_cmdline_quoting_as_the_kernel_reads_it(text: str, args: tuple[str, ...]) -> None:
    assert parse_cmdline(text) == args


#: an argument as a baseline may write it (model/types.py KernelArg): no quote, no space
KERNEL_ARG = st.from_regex(r"\A[A-Za-z0-9_.-]+(=[A-Za-z0-9_.,:/-]+)?\Z")


@given(st.lists(KERNEL_ARG, max_size=12), st.sampled_from([" ", "  ", "\t"]))
def test_every_argument_sparkbase_renders_reads_back_unchanged(args: list[str], gap: str) -> None:
    assert parse_cmdline(gap.join(args) + "\n") == tuple(args)


# --- mokutil: a firmware without Secure Boot --------------------------------------------

NO_SB = real("mokutil_--sb-state__firmware_without_secure_boot__fedora44-vm.txt")


def test_no_secure_boot_in_the_firmware_is_a_state() -> None:
    state = parse_sb_state(NO_SB)
    assert state is SecureBoot.NO_SECURE_BOOT and not state.enforcing


def test_the_audit_judges_a_firmware_without_secure_boot_as_secure_boot_off() -> None:
    facts = NodeFacts(node="spark1", secure_boot=parse_sb_state(NO_SB))
    wanted = secure_boot_outcome(True, facts)
    assert wanted.status == "fail"
    assert "off: the firmware has no Secure Boot" in str(wanted.observed)
    assert wanted.fix is not None and "without Secure Boot" in wanted.fix
    assert secure_boot_outcome(False, facts).status == "pass"


# --- engine metrics ---------------------------------------------------------------------

IDLE = real("metrics__vllm_idle_no_kv_cache_usage_perc__production-stack-318.txt")


def test_an_idle_engine_is_zero_sessions_whatever_the_scrape_lacks() -> None:
    """The real idle vLLM exports no kv_cache_usage_perc and no cache info: it was unknown."""
    status, evidence = _session_verdict(SITE, IDLE)
    assert status == UNKNOWN and "(none with more than 3 sessions" in evidence[0], evidence  # a snapshot
    assert "peak concurrency 0" in evidence[1]
    figures = key_figures(_session_trigger(SITE), parse_scrapes(IDLE, 1000.0))
    assert "running requests 0, KV-cache tokens in use unknown, sessions of ≥500000 tokens 0" in figures


def test_a_running_engine_without_kv_reading_stays_unjudged() -> None:
    status, evidence = _session_verdict(SITE, IDLE.replace("} 0.0\n# HELP vllm:num_requests_waiting",
                                                           "} 2.0\n# HELP vllm:num_requests_waiting"))
    wanted = "no sglang:num_running_reqs or vllm:num_requests_running samples with KV-cache usage"
    assert status == UNKNOWN and evidence[0].startswith(wanted), evidence


HYBRID = real("metrics__vllm_cache_config_info_kv_cache_size_tokens_hybrid_DeepSeek-V4__vllm-51163.txt")


def test_vllm_kv_capacity_is_read_from_kv_cache_size_tokens() -> None:
    """90 % of the real engine's 1,179,770 tokens hold two 500K sessions; blocks x block
    size (20,377 x 4 = 81,508 tokens) held none."""
    scrape = HYBRID + "vllm:num_requests_running 3\nvllm:kv_cache_usage_perc 0.9\n"
    status, evidence = _session_verdict(SITE, scrape)
    assert "peak concurrency 2," in evidence[1], evidence
    assert status == UNKNOWN and "(none with more than 3" in evidence[0]  # two is not more than three
    figures = key_figures(_session_trigger(SITE), parse_scrapes(scrape, 1000.0))
    assert "KV-cache tokens in use 1,061,793" in figures


DP_RANKS = parse_scrapes(real("metrics__sglang_dp_attention_8_ranks_gen_throughput__aibrix-1614.txt"), 0.0)


def _dp_attention_scrape(running: int, used: int) -> str:
    """The trigger's two gauges with the label sets of the real DP-attention engine (seven
    DP ranks, tp_rank = dp_rank), each rank running `running` requests over `used` tokens."""
    lines = []
    for sample in (s for s in DP_RANKS if s.metric == "sglang:gen_throughput"):
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
        lines += [f"sglang:num_running_reqs{{{labels}}} {running}",
                  f"sglang:num_used_tokens{{{labels}}} {used}"]
    return "\n".join(lines) + "\n"


def test_sglang_data_parallel_attention_ranks_are_summed() -> None:
    """One 600K session on each of seven DP ranks is seven long sessions, not tp_rank 0's one."""
    status, evidence = _session_verdict(SITE, _dp_attention_scrape(1, 600_000))
    assert status == UNKNOWN and "(one with more than 3" in evidence[0], evidence  # a snapshot
    assert "peak concurrency 7," in evidence[1]
    assert "; and 3 more" in evidence[2]  # seven instances read, four named


def test_sglang_ranks_of_one_group_on_several_nodes_count_once() -> None:
    """A TP group over two nodes that both report (--enable-metrics-for-all-schedulers):
    spark2's tp_rank 1 is the same batch as spark1's tp_rank 0."""
    lines = [f'sglang:{m}{{instance="{node}",model_name="ds",tp_rank="{rank}",moe_ep_rank="{rank}"}} {v}'
             for node, rank in (("spark1", 0), ("spark2", 1))
             for m, v in (("num_running_reqs", 4), ("num_used_tokens", 2_000_000))]
    _status, evidence = _session_verdict(SITE, "\n".join(lines))
    assert "peak concurrency 4," in evidence[1]


def test_sglang_engines_of_their_own_on_two_nodes_each_count() -> None:
    lines = [f'sglang:{m}{{instance="{node}",model_name="ds",tp_rank="0"}} {v}'
             for node in ("spark1", "spark2")
             for m, v in (("num_running_reqs", 2), ("num_used_tokens", 1_000_000))]
    _status, evidence = _session_verdict(SITE, "\n".join(lines))
    assert "peak concurrency 4," in evidence[1]


# --- trigger 1: the driver pin ----------------------------------------------------------

def _kernel_pin(site: Site) -> KernelPinTrigger:
    return next(t for t in site.rules.triggers if isinstance(t, KernelPinTrigger))


def _with_driver(site: Site, version: str, nodes: tuple[str, ...]) -> Site:
    """The site with `nodes` on a copy of their baseline whose driver pin is `version`."""
    baselines = dict(site.baselines)
    inventory_nodes = dict(site.inventory.nodes)
    for node in nodes:
        base = site.baseline_of(node)
        name = f"moved-{node}"
        driver = base.driver.model_copy(update={"version": version})
        baselines[name] = base.model_copy(update={"driver": driver})
        inventory_nodes[node] = inventory_nodes[node].model_copy(update={"baseline": name})
    inventory = site.inventory.model_copy(update={"nodes": inventory_nodes})
    return replace(site, baselines=baselines, inventory=inventory)


def test_the_shipped_trigger_records_the_driver_pin_the_site_runs() -> None:
    trigger = _kernel_pin(SITE)
    assert trigger.driver_pin == SITE.baseline_of("spark1").driver.version
    verdict = next(v for v in evaluate(SITE, None) if v.kind == "kernel-pin")
    assert verdict.status == QUIET
    assert any(line.startswith(f"site driver pin: {trigger.driver_pin} (spark1, spark2, spark3, spark4)")
               for line in verdict.evidence)


@pytest.mark.parametrize("nodes", [("spark1", "spark2", "spark3", "spark4"), ("spark3",)],
                         ids=["whole fleet", "one node"])
def test_kernel_pin_trigger_fires_on_a_driver_pin_move(nodes: tuple[str, ...]) -> None:
    moved = _with_driver(SITE, "580.178.04", nodes)
    verdict = next(v for v in evaluate(moved, None) if v.kind == "kernel-pin")
    assert verdict.fired, verdict.evidence
    line = next(line for line in verdict.evidence if line.startswith("site driver pin:"))
    assert "580.178.04 (" in line and "a move from 580.126.09; moved" in line


def test_a_site_without_a_recorded_driver_pin_judges_the_kernel_only() -> None:
    trigger = _kernel_pin(SITE).model_copy(update={"driver_pin": None})
    rules = SITE.rules.model_copy(update={"triggers": [trigger]})
    moved = replace(_with_driver(SITE, "580.178.04", ("spark1",)), rules=rules)
    verdict = next(v for v in evaluate(moved, None) if v.kind == "kernel-pin")
    assert verdict.status == QUIET and not any("driver" in line for line in verdict.evidence)
