"""DGX OS's tuning units (issue 12): the CPU governor with linux-tools, NVMe interrupt
coalescing. Model values with their sources, the rule, the parser, the audit checks and
the deploy decisions, as data."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_audit_support import converged_node, shipped

from sparkbase.audit.checks import node_checks
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import CheckResult
from sparkbase.deploy.operations.host import decide_coalescing_off, decide_coalescing_on, decide_governor
from sparkbase.facts.model import NodeFacts, UnitState
from sparkbase.facts.parsers.host import parse_nvme_feature
from sparkbase.model.host import GOVERNOR_UNIT, NVME_COALESCING_SCRIPT, NVME_COALESCING_UNIT
from sparkbase.model.ownership import Kind, OwnedItem
from sparkbase.model.provenance import RecipeSource
from sparkbase.model.rules import baseline_findings
from sparkbase.model.site import Site

SITE = shipped()
VARIANT = "ds41f-7x-64k"
STOCK_PAGES = "ds41f-stock-pages-262k"
SITE_BASELINE = "site-stock-6.17-4k"


@pytest.fixture(scope="module")
def site() -> Site:
    return SITE


# --- model: values and their sources ----------------------------------------------------


@pytest.mark.parametrize(("baseline", "tools_pin"), [
    (VARIANT, "linux-tools-7.0.0-1019-nvidia-64k=7.0.0-1019.19~24.04.2"),
    (STOCK_PAGES, "linux-tools-7.0.0-1019-nvidia=7.0.0-1019.19~24.04.2"),
    (SITE_BASELINE, "linux-tools-6.17.0-1032-nvidia=6.17.0-1032.32"),
])
def test_every_governed_baseline_pins_linux_tools_of_its_kernel(
    site: Site, baseline: str, tools_pin: str
) -> None:
    b = site.baselines[baseline]
    assert b.host.cpu_governor == "performance"
    assert tools_pin in [f"{pin.name}={pin.version}" for pin in b.packages()]


def _recipe(site: Site, baseline: str, key: str) -> RecipeSource:
    """The recipe source of `key` in `baseline` (fails when it is another kind)."""
    source = site.baselines[baseline].sources[key]
    assert isinstance(source, RecipeSource), source
    return source


def test_variant_sources_name_the_recipe_files(site: Site) -> None:
    tools = _recipe(site, VARIANT, "kernel.tools")
    assert (tools.file, tools.commit) == ("docs/setup.md", "cff464c6")
    governor = _recipe(site, VARIANT, "host.cpu_governor")
    assert (governor.file, governor.commit) == ("docs/doctor.md", "0161d716")
    coalescing = _recipe(site, VARIANT, "host.nvme.interrupt_coalescing")
    assert coalescing.kind == "recipe" and coalescing.file == "docs/setup.md"
    assert "disagree" in (coalescing.note or "") and "3df77d2e" in (coalescing.note or "")
    assert site.baselines[VARIANT].host.nvme.interrupt_coalescing is False


def test_stock_pages_keeps_the_variant_governor_and_coalescing(site: Site) -> None:
    b = site.baselines[STOCK_PAGES]
    assert b.kernel.tools and b.host.nvme.interrupt_coalescing is False
    tools = _recipe(site, STOCK_PAGES, "kernel.tools")
    assert tools.file == "experiments/2026-10-02-kernel-64k/boot-test/README.md"


def test_site_governor_is_a_placeholder_and_coalescing_the_factory_default(site: Site) -> None:
    b = site.baselines[SITE_BASELINE]
    assert b.sources["host.cpu_governor"].kind == "placeholder"
    assert b.host.nvme.interrupt_coalescing is True


@pytest.mark.parametrize(("governor", "tools", "found"), [
    ("performance", False, True),
    ("performance", True, False),
    (None, False, False),
])
def test_a_managed_governor_needs_the_kernels_linux_tools(
    site: Site, governor: str | None, tools: bool, found: bool
) -> None:
    b = site.baselines[VARIANT]
    b = b.model_copy(update={"kernel": b.kernel.model_copy(update={"tools": tools}),
                             "host": b.host.model_copy(update={"cpu_governor": governor})})
    findings = [f for f in baseline_findings(VARIANT, b) if f.path == ("host", "cpu_governor")]
    assert bool(findings) == found
    if found:
        assert "linux-tools-7.0.0-1019-nvidia-64k" in findings[0].message


# --- parser --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"), [
    ("get-feature:0x08 (Interrupt Coalescing), Current value:0x00000107\n", 0x107),
    ("get-feature:0x08 (Interrupt Coalescing), Current value:00000000\n", 0),
    ("get-feature:0x8 (Interrupt Coalescing), Current value:0x000107\n", 0x107),  # older nvme-cli
])
def test_nvme_feature_values(text: str, value: int) -> None:
    assert parse_nvme_feature(text, 8) == value


@pytest.mark.parametrize("text", [
    "NVMe status: Invalid Field in Command: A reserved coded value or an unsupported value in a "
    "defined field(0x2)\n",
    "get-feature:0x0c (Autonomous Power State Transition), Current value:0x00000001\n",
    "get-feature:0x08 (Interrupt Coalescing), Saved value:0x00000107\n",
    "",
])
def test_nvme_feature_refuses_other_answers(text: str) -> None:
    with pytest.raises(ValueError):
        parse_nvme_feature(text, 8)


# --- audit checks --------------------------------------------------------------------------


def judged(check_id: str, expected: Expected, facts: NodeFacts) -> CheckResult:
    """The check `check_id` planned on `expected` and judged on `facts`."""
    return node_checks()[check_id].run(expected, facts, None, check_id)


@pytest.mark.parametrize("baseline", [SITE_BASELINE, VARIANT, STOCK_PAGES])
def test_converged_node_passes_the_tuning_checks(site: Site, baseline: str) -> None:
    expected, facts = converged_node(site, "spark3", baseline)
    for check_id in ("host.governor", "host.governor_unit", "host.nvme_coalescing"):
        assert judged(check_id, expected, facts).status == "pass", check_id


GOVERNOR_CASES = [
    # (governors, unit state, status, words in the observed text or fix)
    ({0: "performance", 1: "schedutil"}, UnitState("enabled", "inactive"), "fail", "systemctl restart"),
    (dict.fromkeys(range(20), "schedutil"), UnitState("enabled", "failed"), "fail", "linux-tools-"),
    (dict.fromkeys(range(20), "performance"), UnitState("enabled", "inactive"), "pass", "CPUs 0-19"),
]


@pytest.mark.parametrize(("governors", "unit", "status", "words"), GOVERNOR_CASES)
def test_governor_check(
    site: Site, governors: dict[int, str], unit: UnitState, status: str, words: str
) -> None:
    expected, facts = converged_node(site, "spark2", VARIANT)
    facts = replace(facts, governors=governors, units={**facts.units, GOVERNOR_UNIT: unit})
    outcome = judged("host.governor", expected, facts)
    assert outcome.status == status
    assert words in f"{outcome.observed} {outcome.fix}"


@pytest.mark.parametrize(("unit", "status"), [
    (UnitState("enabled", "failed"), "fail"),
    (UnitState("masked", "inactive"), "fail"),
    (UnitState("enabled", "inactive"), "pass"),
])
def test_governor_unit_check(site: Site, unit: UnitState, status: str) -> None:
    expected, facts = converged_node(site, "spark2", VARIANT)
    facts = replace(facts, units={**facts.units, GOVERNOR_UNIT: unit})
    assert judged("host.governor_unit", expected, facts).status == status


COALESCING_CASES = [
    # (baseline, feature value, unit state, status)
    (VARIANT, 0, UnitState("masked", "inactive"), "pass"),
    (VARIANT, 0, UnitState("", "inactive"), "pass"),  # no DGX OS package: nothing turns it on
    (VARIANT, 0x107, UnitState("masked", "inactive"), "fail"),
    (VARIANT, 0, UnitState("enabled", "inactive"), "fail"),  # it turns coalescing on at next boot
    (SITE_BASELINE, 0x107, UnitState("enabled", "active"), "pass"),
    (SITE_BASELINE, 0, UnitState("enabled", "active"), "fail"),
    (SITE_BASELINE, 0x107, UnitState("masked", "inactive"), "fail"),
]


@pytest.mark.parametrize(("baseline", "value", "unit", "status"), COALESCING_CASES)
def test_coalescing_check(site: Site, baseline: str, value: int, unit: UnitState, status: str) -> None:
    expected, facts = converged_node(site, "spark2", baseline)
    facts = replace(facts, nvme_coalescing=value, units={**facts.units, NVME_COALESCING_UNIT: unit})
    assert judged("host.nvme_coalescing", expected, facts).status == status


def test_coalescing_unread_is_unknown(site: Site) -> None:
    expected, facts = converged_node(site, "spark2", VARIANT)
    facts = replace(facts, nvme_coalescing=None, errors={"nvme-coalescing": "exit 1: permission denied"})
    outcome = judged("host.nvme_coalescing", expected, facts)
    assert outcome.status == "fail" and "permission denied" in str(outcome.observed)


# --- deploy decisions --------------------------------------------------------------------

R64 = "7.0.0-1019-nvidia-64k"
GOVERNOR_DECISIONS = [
    # (running kernel, unit state, governors, commands, words in the reason)
    (R64, UnitState("enabled", "inactive"), {0: "schedutil"}, [["systemctl", "restart", GOVERNOR_UNIT]], ""),
    (R64, UnitState("enabled", "failed"), {0: "performance"}, [["systemctl", "restart", GOVERNOR_UNIT]], ""),
    (R64, UnitState("enabled", "inactive"), {0: "performance"}, [], "every CPU runs performance"),
    ("6.17.0-1008-nvidia", UnitState("enabled", "failed"), {0: "schedutil"}, [], "next boot"),
    (R64, UnitState("masked", "inactive"), {0: "schedutil"}, [], "kept: "),
    (R64, UnitState("", "inactive"), {0: "schedutil"}, [], "not installed"),
]


@pytest.mark.parametrize(("running", "unit", "governors", "commands", "words"), GOVERNOR_DECISIONS)
def test_governor_decision(running: str, unit: UnitState, governors: dict[int, str],
                           commands: list[list[str]], words: str) -> None:
    decision = decide_governor("performance", R64, running, unit, governors)
    assert decision.commands == commands
    assert words in decision.reason


MASK = ["systemctl", "mask", "--now", NVME_COALESCING_UNIT]
DISABLE = [NVME_COALESCING_SCRIPT, "disable"]
OFF_DECISIONS = [
    (UnitState("enabled", "active"), 0x107, [MASK, DISABLE]),
    (UnitState("enabled", "active"), 0, [MASK, DISABLE]),
    (UnitState("masked", "inactive"), 0x107, [DISABLE]),
    (UnitState("masked", "inactive"), 0, []),
    (UnitState("", "inactive"), 0x107, [["nvme", "set-feature", "/dev/nvme0", "-f", "0x08", "--value=0x0"]]),
]


@pytest.mark.parametrize(("unit", "value", "commands"), OFF_DECISIONS)
def test_coalescing_off_decision(unit: UnitState, value: int, commands: list[list[str]]) -> None:
    assert decide_coalescing_off(unit, value).commands == commands


def _mask(original: str) -> OwnedItem:
    return OwnedItem(kind=Kind.MASK, target=NVME_COALESCING_UNIT, baseline=VARIANT,
                     recorded_at="2026-12-01T00:00:00Z", original=original, written="masked")


START = ["systemctl", "start", NVME_COALESCING_UNIT]
UNMASK = ["systemctl", "unmask", NVME_COALESCING_UNIT]
ON_DECISIONS = [
    # (unit now, value, sparkbase's mask record, commands, forgets the record, words in the reason)
    (UnitState("masked", "inactive"), 0, _mask("enabled"),
     [UNMASK, ["systemctl", "enable", NVME_COALESCING_UNIT], START], True, ""),
    (UnitState("masked", "inactive"), 0, _mask("disabled"), [UNMASK, START], True, ""),
    (UnitState("masked", "inactive"), 0, None, [], False, "kept: "),
    (UnitState("disabled", "inactive"), 0, _mask("enabled"), [], True, "kept: "),  # someone unmasked it
    (UnitState("enabled", "active"), 0, None, [["systemctl", "restart", NVME_COALESCING_UNIT]], False, ""),
    (UnitState("enabled", "active"), 0x107, None, [], False, "coalescing on"),
    (UnitState("", "inactive"), 0, None, [], False, "not installed"),
]


@pytest.mark.parametrize(("unit", "value", "mask", "commands", "forgets", "words"), ON_DECISIONS)
def test_coalescing_on_decision(unit: UnitState, value: int, mask: OwnedItem | None,
                                commands: list[list[str]], forgets: bool, words: str) -> None:
    decision = decide_coalescing_on(unit, value, mask)
    assert decision.commands == commands
    assert (decision.forget == ((Kind.MASK, NVME_COALESCING_UNIT),)) == forgets
    assert words in decision.reason
