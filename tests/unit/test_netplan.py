"""netplan as the node has it (issue 21, point 3): the files netplan reads, which interfaces each
configures, the refusal while another file configures a fabric port (cases as data), and the
site's file taken over and put back.

`netplan_cases/*.json`: one case per file: the node's netplan files (`files`: path -> lines,
null for a name that is not a regular file), its ownership record (`owned`; a `sha256` given as
`{"of": PATH}` is that file's, `{"of": "-"}` one no file has), the fabric's file (`own`) and
ports; out: the refusal's parts (`refused`), or the files removed and put back, the record
entries forgotten and the notes.
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sparkbase.audit.checks.fabric import fabric_netplan
from sparkbase.audit.expected import expected_for
from sparkbase.audit.registry import Subject
from sparkbase.deploy.areas.fabric import NetplanFiles, NetplanTakeover
from sparkbase.deploy.areas.files import File
from sparkbase.deploy.assign import with_assignment
from sparkbase.deploy.operations import fabric as fabric_operations
from sparkbase.deploy.reads import fact_plan
from sparkbase.deploy.steps import build_steps
from sparkbase.errors import ConfigError
from sparkbase.facts.model import NetplanListing, NetplanSource, NodeFacts
from sparkbase.facts.parsers.fabric import (
    MAX_NETPLAN_BYTES,
    NETPLAN_FILES_COMMAND,
    effective_sources,
    ethernet_settings,
    load_netplan_yaml,
    netplan_bool,
    parse_netplan_listing,
    parse_netplan_yaml,
)
from sparkbase.model.ownership import Kind, OwnedItem, OwnershipRecord
from sparkbase.model.site import Site, load_site
from sparkbase.policy.netplan import decide_netplan_files, decide_takeover, merge_fabric, sha256_text
from sparkbase.render import NETPLAN_PATH, fabric_ethernets, node_files, node_paths

REPO = Path(__file__).resolve().parents[2]
CASES = sorted((Path(__file__).parent / "netplan_cases").glob("*.json"))
REAL = Path(__file__).parents[1] / "fixtures" / "real"
NVIDIA_40_CX7 = (REAL / "etc_netplan_40-cx7.yaml__DGX_Spark_node1_two_views_of_one_port__"
                        "dgx-spark-playbooks.txt").read_text()
SITE_FILE = "/etc/netplan/40-fabric.yaml"
WHEN = "2026-12-03T00:00:00Z"
PORTS = ("enp1s0f0np0", "enP2p1s0f0np0", "enp1s0f1np1", "enP2p1s0f1np1")


def _fabric(addresses: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    addresses = addresses or {"enp1s0f0np0": "10.0.1.1/24", "enP2p1s0f0np0": "10.0.2.1/24",
                              "enp1s0f1np1": "10.0.3.1/24"}
    return {port: {"dhcp4": False, "dhcp6": False, "link-local": [], "mtu": 9000,
                   "addresses": [addresses[port]] if port in addresses else []} for port in PORTS}


def _source(path: str, text: str | None, mode: int = 0o644, link: bool = False) -> NetplanSource:
    if text is None:
        return NetplanSource(path, None, link=link, problem="not a regular file")
    return NetplanSource(path, text, sha256_text(text), mode, link)


# --- reading the node's files --------------------------------------------------------------------


def _line(path: str, data: bytes | None, mode: str = "644", link: bool = False) -> str:
    name = base64.b64encode(path.encode()).decode()
    flag = "L" if link else "-"
    if data is None:
        return f"O {name} {flag}"
    return f"F {name} {flag} {mode} b64:{base64.b64encode(data).decode()}"


def test_the_listing_reads_each_file_exactly_and_says_what_it_could_not_read() -> None:
    big = b"#" * (MAX_NETPLAN_BYTES + 1)
    text = "\n".join([
        _line("/etc/netplan/40-fabric.yaml", b"network: {}\n", "600"),
        _line("/etc/netplan/41-link.yaml", b"network: {}", link=True),
        _line("/etc/netplan/42-dir.yaml", None),
        _line("/etc/netplan/43-big.yaml", big),
        _line("/etc/netplan/44-latin1.yaml", "# caf\u00e9\n".encode("latin-1")),
        _line("/etc/netplan/45 odd\nname.yaml", b""),
        "MORE",
    ]) + "\n"
    listing = parse_netplan_listing(text)
    files = {source.path: source for source in listing.sources}
    assert files["/etc/netplan/40-fabric.yaml"] == NetplanSource(
        "/etc/netplan/40-fabric.yaml", "network: {}\n", hashlib.sha256(b"network: {}\n").hexdigest(), 0o600)
    link, large = files["/etc/netplan/41-link.yaml"], files["/etc/netplan/43-big.yaml"]
    assert link.link and link.text == "network: {}"
    assert files["/etc/netplan/42-dir.yaml"].problem == "not a regular file"
    assert large.text is None and "larger than" in large.problem
    assert files["/etc/netplan/44-latin1.yaml"].text is None
    assert "not UTF-8" in files["/etc/netplan/44-latin1.yaml"].problem
    assert files["/etc/netplan/45 odd\nname.yaml"].text == ""
    assert listing.more


def test_the_listing_command_and_parser_agree_on_a_real_tree(tmp_path: Path) -> None:
    """The command, run by sh against a tree laid out as netplan's three directories."""
    for directory in ("lib", "etc", "run"):
        (tmp_path / directory / "netplan").mkdir(parents=True)
    (tmp_path / "etc/netplan/40-cx7.yaml").write_text(NVIDIA_40_CX7)
    (tmp_path / "etc/netplan/40-cx7.yaml").chmod(0o600)
    (tmp_path / "lib/netplan/40-cx7.yaml").write_text("network: {}\n")
    (tmp_path / "etc/netplan/50-dangling.yaml").symlink_to(tmp_path / "nowhere")
    (tmp_path / "run/netplan/not-yaml.conf").write_text("x")
    command = NETPLAN_FILES_COMMAND.replace(" /", f" {tmp_path}/")
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    listing = parse_netplan_listing(done.stdout)
    by_name = {source.path.removeprefix(str(tmp_path)): source for source in listing.sources}
    assert sorted(by_name) == ["/etc/netplan/40-cx7.yaml", "/etc/netplan/50-dangling.yaml",
                               "/lib/netplan/40-cx7.yaml"]
    assert by_name["/etc/netplan/40-cx7.yaml"].text == NVIDIA_40_CX7
    assert by_name["/etc/netplan/40-cx7.yaml"].mode == 0o600
    dangling = by_name["/etc/netplan/50-dangling.yaml"]
    assert dangling.link and dangling.text is None
    read = [source.path.removeprefix(str(tmp_path)) for source in effective_sources(listing.sources)]
    assert read == ["/etc/netplan/40-cx7.yaml", "/etc/netplan/50-dangling.yaml"]


def test_run_shadows_etc_shadows_lib_and_names_sort_across_directories() -> None:
    sources = [_source("/lib/netplan/10-a.yaml", "1"), _source("/lib/netplan/20-b.yaml", "2"),
               _source("/etc/netplan/20-b.yaml", "3"), _source("/run/netplan/20-b.yaml", "4"),
               _source("/etc/netplan/05-c.yaml", "5"), _source("/etc/netplan/Z.yaml", "6")]
    assert [s.path for s in effective_sources(sources)] == [
        "/etc/netplan/05-c.yaml", "/lib/netplan/10-a.yaml", "/run/netplan/20-b.yaml", "/etc/netplan/Z.yaml"]


def test_a_file_that_does_not_parse_says_where() -> None:
    with pytest.raises(ValueError, match="line 3: mapping values are not allowed here"):
        parse_netplan_yaml("network:\n  ethernets:\n    a: b: c\n")
    with pytest.raises(ValueError, match=r"unknown key network\.foo"):
        parse_netplan_yaml("network:\n  foo: {}\n")
    with pytest.raises(ValueError, match="nested deeper"):
        parse_netplan_yaml("network: " + "[" * 100)
    with pytest.raises(ValueError, match="larger than"):
        load_netplan_yaml("#" * (MAX_NETPLAN_BYTES + 1))
    assert parse_netplan_yaml("").netdefs == ()
    assert parse_netplan_yaml("# comments only\n").netdefs == ()


def test_an_alias_bomb_is_read_without_expanding_it() -> None:
    """Aliases are shared references in the loaded data, and only the keys netplan's device
    types name are walked: a billion laughs costs nothing."""
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8))
    text = "network:\n  ethernets:\n    enp1s0f0np0:\n      addresses: [10.0.0.1/24]\nbomb:\n" + "".join(
        "  " + line + "\n" for line in bomb.splitlines())
    with pytest.raises(ValueError, match="unknown top-level key 'bomb'"):
        parse_netplan_yaml(text)


def test_settings_read_as_netplan_reads_them() -> None:
    assert [netplan_bool(v) for v in ("no", "N", "off", "False", "yes", "On", "y", True, "maybe")] == [
        False, False, False, False, True, True, True, True, "maybe"]
    data = load_netplan_yaml(NVIDIA_40_CX7)
    assert ethernet_settings(data, ["enp1s0f1np1", "enp1s0f0np0"], ["dhcp4", "addresses", "mtu"]) == {
        "enp1s0f1np1": {"dhcp4": False, "addresses": ["192.168.100.10/24"]}}


# --- the refusal, as data ------------------------------------------------------------------------


def _text(lines: list[str] | None) -> str | None:
    return None if lines is None else "".join(f"{line}\n" for line in lines)


def _record(items: list[dict[str, Any]], files: dict[str, str | None]) -> OwnershipRecord:
    made = []
    for item in items:
        item = dict(item)
        of = item.pop("sha256")["of"]
        text = files.get(of)
        item["sha256"] = sha256_text(text) if text is not None else "0" * 64
        if isinstance(item.get("original"), list):
            item["original"] = _text(item["original"])
        made.append(OwnedItem.model_validate(item))
    return OwnershipRecord(items=tuple(made))


@pytest.mark.parametrize("case_file", CASES, ids=[c.stem for c in CASES])
def test_netplan_files_decision(case_file: Path) -> None:
    case = json.loads(case_file.read_text())
    files = {path: _text(lines) for path, lines in case["files"].items()}
    listing = NetplanListing(tuple(_source(path, text) for path, text in files.items()), case["more"])
    decision = decide_netplan_files(case["own"], case["interfaces"], listing, _record(case["owned"], files))
    if case["refused"]:
        assert decision.refusal is not None, decision
        for part in case["refused"]:
            assert part in decision.refusal, f"{part!r} not in {decision.refusal!r}"
        assert not decision.changes or decision.refusal
        return
    assert decision.refusal is None, decision.refusal
    assert list(decision.remove) == case["remove"]
    assert [{"path": r.path, "text": r.text, "mode": r.mode} for r in decision.restore] == [
        {**r, "text": _text(r["text"])} for r in case["restore"]]
    assert [[kind.value, target] for kind, target in decision.forget] == case["forget"]
    for part in case["notes"]:
        assert any(part in note for note in decision.notes), decision.notes


# --- taking the site's file over -----------------------------------------------------------------


def test_the_takeover_merges_the_fabric_and_keeps_what_the_site_wrote() -> None:
    operator = ("# management and fabric, by hand\nnetwork:\n    version: 2\n    renderer: networkd\n"
                "    ethernets:\n        enP7s7:   # management\n            dhcp4: true\n"
                "            optional: true\n        enp1s0f0np0:\n            dhcp4: no\n"
                "            mtu: 9000\n            addresses: [10.99.0.5/24]\n            optional: true\n")
    decision = decide_takeover(SITE_FILE, _fabric(), _source(SITE_FILE, operator, 0o644), OwnershipRecord(),
                               "e2e", WHEN)
    assert decision.refusal is None and decision.text is not None
    text = decision.text
    assert text.startswith("# management and fabric, by hand\nnetwork:\n    version: 2\n"
                           "    renderer: networkd\n")
    assert "        enP7s7:   # management\n            dhcp4: true\n            optional: true\n" in text
    # dhcp4 `no` already means false: kept as written; the stale address replaced; optional kept
    assert ("        enp1s0f0np0:\n            dhcp4: no\n            mtu: 9000\n"
            "            addresses: [10.0.1.1/24]\n            optional: true\n") in text
    data = load_netplan_yaml(text)
    assert ethernet_settings(data, list(PORTS), ["dhcp4", "dhcp6", "link-local", "mtu", "addresses"]) == {
        port: {**settings} for port, settings in _fabric().items()}
    record = decision.record
    assert record is not None and record.kind is Kind.EDITED_FILE and record.target == SITE_FILE
    assert (record.original, record.mode, record.sha256) == (operator, 0o644, sha256_text(text))
    again = decide_takeover(SITE_FILE, _fabric(), _source(SITE_FILE, text, 0o600),
                            OwnershipRecord(items=(record,)), "e2e", WHEN)
    assert again.text is None and again.refusal is None and "as the baseline does" in again.reason


def test_the_real_dgx_spark_file_is_taken_over_keeping_its_style() -> None:
    text = merge_fabric(NVIDIA_40_CX7, _fabric())
    assert text.startswith("network:\n  version: 2\n  ethernets:\n    enp1s0f1np1:\n")
    assert "      addresses: [10.0.3.1/24]\n      dhcp4: no\n" in text
    assert merge_fabric(text, _fabric()) == text
    assert decide_takeover(SITE_FILE, _fabric(), _source(SITE_FILE, text), OwnershipRecord(), "e2e",
                           WHEN).text is None


def test_a_rewrite_updates_the_record_only_while_the_file_is_as_sparkbase_wrote_it() -> None:
    first = decide_takeover(SITE_FILE, _fabric(), _source(SITE_FILE, NVIDIA_40_CX7), OwnershipRecord(), "a",
                            WHEN)
    assert first.text is not None and first.record is not None
    record = OwnershipRecord(items=(first.record,))
    moved = _fabric({"enp1s0f0np0": "10.0.9.1/24"})
    again = decide_takeover(SITE_FILE, moved, _source(SITE_FILE, first.text), record, "b", WHEN)
    assert again.text is not None and again.record is not None
    assert again.record.original == NVIDIA_40_CX7 and again.record.sha256 == sha256_text(again.text)
    edited = first.text + "# by hand\n"
    changed = decide_takeover(SITE_FILE, moved, _source(SITE_FILE, edited), record, "b", WHEN)
    assert changed.text is not None and changed.record is None  # never put back whole any more


def test_a_takeover_cut_short_after_its_record_is_finished_by_the_next_run() -> None:
    """The edit is recorded before the file is written: killed between the two, the node still
    holds the site's text, the record holds it as the original, and the next run writes the
    merged text keeping that record (the site's text is never lost)."""
    first = decide_takeover(SITE_FILE, _fabric(), _source(SITE_FILE, NVIDIA_40_CX7), OwnershipRecord(), "a",
                            WHEN)
    assert first.record is not None
    recorded = OwnershipRecord(items=(first.record,))
    again = decide_takeover(SITE_FILE, _fabric(), _source(SITE_FILE, NVIDIA_40_CX7), recorded, "a", WHEN)
    assert again.text == first.text and again.record is None
    assert recorded.items[0].original == NVIDIA_40_CX7


def test_the_takeover_records_before_it_writes() -> None:
    source = inspect.getsource(fabric_operations.netplan_takeover)
    assert source.index("remember(decision.record)") < source.index("_put(path, decision.text, mode)")


@pytest.mark.parametrize(("source", "refusal"), [
    (None, "does not exist on the node"),
    (_source(SITE_FILE, "network: {}\n", link=True), "is a symbolic link"),
    (_source(SITE_FILE, None), "cannot be taken over: not a regular file"),
    (_source(SITE_FILE, "network:\n  ethernets: [\n"), "does not parse (line"),
    (_source(SITE_FILE, "network:\n  ethernets:\n    fab0:\n      match: {name: enp1s0f0np0}\n"),
     "configures enp1s0f0np0 through ethernets.fab0"),
    (_source(SITE_FILE, "network:\n  bonds:\n    bond0:\n      interfaces: [enp1s0f1np1]\n"),
     "configures enp1s0f1np1 through bonds.bond0 takes it over"),
    (_source(SITE_FILE, "network:\n  ethernets:\n    any:\n      match: {driver: mlx5_core}\n"),
     "ethernets.any matches by MAC address or driver"),
])
def test_what_cannot_be_taken_over_is_refused(source: NetplanSource | None, refusal: str) -> None:
    decision = decide_takeover(SITE_FILE, _fabric(), source, OwnershipRecord(), "e2e", WHEN)
    assert decision.text is None and decision.refusal is not None
    assert refusal in decision.refusal and "nothing was written" in decision.refusal


def test_a_file_put_back_is_the_text_sparkbase_found() -> None:
    operator = "# management (ops)\nnetwork:\n  ethernets:\n    enP7s7: {dhcp4: true}\n"
    taken = decide_takeover(SITE_FILE, _fabric(), _source(SITE_FILE, operator, 0o640), OwnershipRecord(), "a",
                            WHEN)
    assert taken.text is not None and taken.record is not None
    listing = NetplanListing((_source(SITE_FILE, taken.text, 0o600),))
    back = decide_netplan_files(NETPLAN_PATH, PORTS, listing, OwnershipRecord(items=(taken.record,)))
    assert back.refusal is None
    assert [(r.path, r.text, r.mode) for r in back.restore] == [(SITE_FILE, operator, 0o640)]
    assert back.forget == ((Kind.EDITED_FILE, SITE_FILE),)


# --- the model, the render, the steps and the audit ----------------------------------------------


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site(REPO)


@pytest.fixture
def takeover_site(site_copy: Path) -> Site:
    (site_copy / "baselines" / "e2e-netplan.yaml").write_text(
        f"extends: site-stock-6.17-4k\nversion: 1.0.0\nfabric:\n  netplan_file: {SITE_FILE}\n"
        "sources:\n  fabric.netplan_file: {kind: site}\n")
    return with_assignment(load_site(site_copy), ["spark1"], "e2e-netplan")


@pytest.mark.parametrize(("path", "message"), [
    ("/etc/netplan/sub/40-fabric.yaml", "not a file netplan reads from /etc/netplan"),
    ("/run/netplan/40-fabric.yaml", "not a file netplan reads from /etc/netplan"),
    ("/etc/netplan/40-fabric.yml", "not a file netplan reads from /etc/netplan"),
    (NETPLAN_PATH, "is sparkbase's own fabric file"),
])
def test_netplan_file_names_a_site_file_netplan_reads(site_copy: Path, path: str, message: str) -> None:
    (site_copy / "baselines" / "bad.yaml").write_text(
        f"extends: site-stock-6.17-4k\nversion: 1.0.0\nfabric:\n  netplan_file: {path}\n")
    with pytest.raises(ConfigError, match=message):
        load_site(site_copy)


def test_the_template_writes_what_the_takeover_merges(site: Site) -> None:
    """One source for the fabric's settings: the rendered file reads back as `fabric_ethernets`."""
    for node in site.inventory.nodes:
        baseline = site.baseline_of(node)
        rendered = next(f for f in node_files(site, node) if f.path == NETPLAN_PATH)
        fabric = fabric_ethernets(baseline, node_paths(site, node))
        data = load_netplan_yaml(rendered.content)
        assert ethernet_settings(data, list(fabric), list(next(iter(fabric.values())))) == fabric


def test_with_netplan_file_the_site_file_is_taken_over_and_no_own_file_written(takeover_site: Site) -> None:
    steps = build_steps(takeover_site, "spark1")
    kinds = [s.kind for s in steps]
    paths = [s.args.path for s in steps if isinstance(s.args, File)]
    assert NETPLAN_PATH not in paths and SITE_FILE not in paths
    takeover = next(s.args for s in steps if isinstance(s.args, NetplanTakeover))
    assert takeover.path == SITE_FILE and takeover.baseline == "e2e-netplan"
    assert takeover.fabric == fabric_ethernets(takeover_site.baseline_of("spark1"),
                                               node_paths(takeover_site, "spark1"))
    check = next(s for s in steps if s.kind == "netplan-files")
    assert check.args == NetplanFiles(path=SITE_FILE, interfaces=list(PORTS))
    assert kinds.index("netplan-files") < kinds.index("netplan-takeover") < kinds.index("netplan-apply")
    assert next(s for s in steps if s.kind == "netplan-apply").after_change_of == SITE_FILE


def test_the_netplan_files_are_read_in_the_plans_one_read(site: Site, takeover_site: Site) -> None:
    for steps in (build_steps(site, "spark1"), build_steps(takeover_site, "spark1")):
        plan = fact_plan(steps)
        assert plan.netplan_files and plan.ownership
    assert SITE_FILE in plan.file_states


def _judge(takeover_site: Site, text: str | None) -> tuple[str, str | None]:
    expected = expected_for(takeover_site, "spark1")
    assert expected.plan().netplan_files
    rendered = expected.file(SITE_FILE)
    assert rendered is not None and rendered.merged
    sources = () if text is None else (_source(SITE_FILE, text, 0o600),)
    facts = NodeFacts(node="spark1", netplan_files=NetplanListing(sources))
    outcome = fabric_netplan(expected, facts, Subject("spark1"))
    return outcome.status, outcome.observed


def test_the_audit_judges_the_fabric_part_of_the_site_file(takeover_site: Site) -> None:
    fabric = fabric_ethernets(takeover_site.baseline_of("spark1"), node_paths(takeover_site, "spark1"))
    merged = merge_fabric("# ops\nnetwork:\n  ethernets:\n    enP7s7: {dhcp4: true}\n", fabric)
    assert _judge(takeover_site, merged)[0] == "pass"
    assert _judge(takeover_site, merged.replace("dhcp4: false", "dhcp4: no"))[0] == "pass"
    status, observed = _judge(takeover_site, merged.replace("mtu: 9000", "mtu: 1500", 1))
    assert status == "fail" and observed == "enp1s0f0np0 mtu: 1500, wants 9000"
    assert _judge(takeover_site, None) == ("fail", "missing")
    status, observed = _judge(takeover_site, "network: [\n")
    assert status == "fail" and observed is not None and observed.startswith("does not parse")
