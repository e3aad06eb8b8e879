"""The recipe's doctor checks of boot and console (issue 24 point 4): UEFI boot order, the DRM
card's driver, the active console's mode and systemd's watchdog; their parsers and fact sections."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from test_audit_support import converged_node, shipped

from sparkbase.audit.expected import expected_for
from sparkbase.audit.run import judge_node
from sparkbase.facts.areas import plan_for, sections
from sparkbase.facts.model import NodeFacts
from sparkbase.facts.parsers.host import (
    ConsoleMode,
    DrmClient,
    EfiBoot,
    EfiEntry,
    parse_console_mode,
    parse_drm_clients,
    parse_drm_drivers,
    parse_efibootmgr,
    parse_manager_properties,
)

SITE = shipped()
VARIANT = "ds41f-7x-64k"
SITE_BASELINE = "site-stock-6.17-4k"
CHECKS = {"host.uefi_first", "host.drm_card", "host.drm_master", "host.drm_master.readable",
          "host.console_text", "host.console_text.readable", "host.watchdog"}

#: the lab's (and a DGX OS install's) entries with a network entry put first
PXE_FIRST = EfiBoot("0001", ("0002", "0001", "0000"), (
    EfiEntry("0000", "UEFI Misc Device", True),
    EfiEntry("0001", "Ubuntu", True),
    EfiEntry("0002", "UEFI PXEv4 (MAC:4CBB470A0B1C)", True),
))


Results = dict[str, tuple[str, str, str]]


def _judge(drift: Callable[[NodeFacts], NodeFacts], baseline: str = VARIANT) -> Results:
    """check id -> (status, severity, fix) of the four checks on a drifted converged node."""
    expected, facts = converged_node(SITE, "spark1", baseline)
    return {r.id: (r.status, r.severity, r.fix or "") for r in judge_node(expected, drift(facts))
            if r.id in CHECKS}


def _failed(results: Results) -> set[str]:
    return {check for check, (status, _, _) in results.items() if status == "fail"}


def test_converged_variant_node_passes_the_four_checks() -> None:
    results = _judge(lambda f: f)
    assert set(results) == CHECKS
    assert {status for status, _, _ in results.values()} == {"pass"}


def test_the_site_baseline_judges_none_of_them() -> None:
    results = _judge(lambda f: replace(f, efi_boot=None, drm_drivers={}, drm_clients={}, console=None,
                                       watchdog={}), SITE_BASELINE)
    assert {status for status, _, _ in results.values()} == {"skip"}


def test_network_entry_first_is_a_warning_with_the_bootorder_fix() -> None:
    results = _judge(lambda f: replace(f, efi_boot=PXE_FIRST))
    assert _failed(results) == {"host.uefi_first"}
    _, severity, fix = results["host.uefi_first"]
    assert severity == "warn"
    assert fix == "sudo efibootmgr --bootorder 0001,0002,0000"


def test_a_label_first_in_order_wins_over_a_duplicate() -> None:
    boot = parse_efibootmgr("BootOrder: 0008,0007\nBoot0007* ubuntu\nBoot0008* ubuntu\n")
    assert boot.find("UBUNTU") == EfiEntry("0008", "ubuntu", True)


def test_no_entry_of_the_os_fails_naming_the_entries() -> None:
    boot = EfiBoot("0000", ("0000",), (EfiEntry("0000", "UEFI Misc Device", True),))
    expected, facts = converged_node(SITE, "spark1", VARIANT)
    result = next(r for r in judge_node(expected, replace(facts, efi_boot=boot)) if r.id == "host.uefi_first")
    assert result.status == "fail" and "'UEFI Misc Device'" in (result.observed or "")


def test_unreadable_boot_order_is_unknown_not_a_pass() -> None:
    results = _judge(lambda f: replace(f, efi_boot=None, errors={**f.errors, "efibootmgr": "exit 2"}))
    assert _failed(results) == {"host.uefi_first"}


def test_no_card_of_the_driver_is_an_error_with_the_recipes_fix() -> None:
    results = _judge(lambda f: replace(f, drm_drivers={"card0": "simple-framebuffer"}))
    assert _failed(results) == {"host.drm_card"}
    _, severity, fix = results["host.drm_card"]
    assert severity == "error" and "modeset=Y" in fix and "/dev/dri/by-path" in fix


def test_no_drm_card_at_all_fails_and_master_is_not_judged() -> None:
    results = _judge(lambda f: replace(f, drm_drivers={}))
    assert _failed(results) == {"host.drm_card"}
    assert results["host.drm_master"][0] == results["host.drm_master.readable"][0] == "skip"


def test_a_process_holding_drm_master_is_an_error_naming_it() -> None:
    clients = (DrmClient("systemd-logind", 1056, False), DrmClient("Xorg", 830, True))
    expected, facts = converged_node(SITE, "spark1", VARIANT)
    result = next(r for r in judge_node(expected, replace(facts, drm_clients={"card0": clients}))
                  if r.id == "host.drm_master")
    assert (result.status, result.severity) == ("fail", "error")
    assert "Xorg/830 (card0) holds DRM master" in (result.observed or "")
    assert "stop or restart that process" in (result.fix or "")


def test_master_of_another_drivers_card_is_not_judged() -> None:
    drift = {"drm_drivers": {"card0": "simpledrm", "card1": "nvidia"},
             "drm_clients": {"card0": (DrmClient("plymouthd", 400, True),), "card1": ()}}
    results = _judge(lambda f: replace(f, **drift))  # type: ignore[arg-type]
    assert _failed(results) == set()


def test_unreadable_drm_clients_warn_and_the_error_check_skips() -> None:
    results = _judge(lambda f: replace(f, drm_clients={"card0": None}))
    assert _failed(results) == {"host.drm_master.readable"}
    assert results["host.drm_master.readable"][1] == "warn"
    assert results["host.drm_master"][0] == "skip"


def test_console_in_graphics_mode_is_an_error_naming_host_recovery() -> None:
    results = _judge(lambda f: replace(f, console=ConsoleMode("tty1", 1)))
    assert _failed(results) == {"host.console_text"}
    _, severity, fix = results["host.console_text"]
    assert severity == "error" and "KD_TEXT" in fix and "host-recovery apply" in fix


def test_unreadable_console_is_a_warning_as_the_recipe_has_it() -> None:
    expected, facts = converged_node(SITE, "spark1", VARIANT)
    drifted = replace(facts, console=None, errors={**facts.errors, "console": "exit 1: PermissionError"})
    results = {r.id: r for r in judge_node(expected, drifted) if r.id in CHECKS}
    assert {i for i, r in results.items() if r.status == "fail"} == {"host.console_text.readable"}
    readable = results["host.console_text.readable"]
    assert readable.severity == "warn" and "PermissionError" in (readable.observed or "")
    assert results["host.console_text"].status == "skip"


@pytest.mark.parametrize("watchdog", [
    {"RuntimeWatchdogUSec": "0", "RebootWatchdogUSec": "10min"},
    {"RuntimeWatchdogUSec": "30s", "RebootWatchdogUSec": "0"},
    {"RuntimeWatchdogUSec": "30s"},
])
def test_watchdog_not_as_the_baseline_says_fails_with_the_drop_in_fix(watchdog: dict[str, str]) -> None:
    results = _judge(lambda f: replace(f, watchdog=watchdog))
    assert _failed(results) == {"host.watchdog"}
    assert "RuntimeWatchdogSec=30s" in results["host.watchdog"][2]
    assert "daemon-reexec" in results["host.watchdog"][2]


def test_console_mode_parser() -> None:
    assert parse_console_mode("tty1 0\n") == ConsoleMode("tty1", 0)
    assert parse_console_mode("tty7 1\n").name == "graphics"
    assert parse_console_mode("tty2 3\n").name == "mode 3"
    for bad in ("", "Traceback (most recent call last):\n", "tty1\n", "ttyS0 0\n", "tty1 x\n"):
        with pytest.raises(ValueError):
            parse_console_mode(bad)


def test_drm_clients_parser_groups_by_card_and_keeps_unreadable() -> None:
    text = ("card0\t             command  tgid dev master a   uid      magic\n"
            "card0\t       my compositor  1733   0   y    y   120          0\n"
            "card1\t(unreadable)\n")
    assert parse_drm_clients(text) == {"card0": (DrmClient("my compositor", 1733, True),), "card1": None}
    header_only = "card0\t             command  tgid dev master a   uid      magic\n"
    assert parse_drm_clients(header_only) == {"card0": ()}
    for bad in ("card0 Xorg 830 0 y y 0 0\n", "card0\tXorg eight\n", "cardX\t(unreadable)\n"):
        with pytest.raises(ValueError):
            parse_drm_clients(bad)


def test_drm_driver_and_manager_parsers_refuse_what_they_cannot_read() -> None:
    with pytest.raises(ValueError):
        parse_drm_drivers("card0 ../../bus/platform/drivers/nvidia\n")
    assert parse_drm_drivers("") == {}
    with pytest.raises(ValueError):
        parse_manager_properties("Failed to connect to bus: No such file or directory\n")


def test_the_variant_asks_the_four_sections_and_the_site_baseline_none() -> None:
    def asked_of(baseline: str) -> set[str]:
        plan = plan_for(expected_for(SITE, "spark1", baseline).baseline, [], "/s")
        return {name for name, _ in sections(plan)}

    variant, site = asked_of(VARIANT), asked_of(SITE_BASELINE)
    asked = {"efibootmgr", "drm-drivers", "drm-clients", "console", "watchdog"}
    assert asked <= variant
    assert not asked & site


def test_the_installed_os_is_found_by_its_esp_folder_too() -> None:
    """As the recipe's doctor: an entry loading from \\EFI\\ubuntu\\ is the installed OS,
    whatever its label (firmware may relabel it)."""
    boot = parse_efibootmgr("BootOrder: 0003,0001\n"
                            "Boot0001* UEFI OS\tHD(1,GPT,x,0x800,0x100000)/\\EFI\\ubuntu\\shimaa64.efi\n"
                            "Boot0003* UEFI PXEv4 (MAC:4CBB470A0B1C)\tMAC(4cbb470a0b1c,0)\n")
    found = boot.find("ubuntu")
    assert found is not None and found.number == "0001"
