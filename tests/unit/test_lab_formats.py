"""The emulated fleet prints what real tools print: checked against the real samples in
tests/fixtures/real/ (no node needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbase_lab import image
from sparkbase_lab.shims import cmd_secureboot, cmd_systemd, modfile

REAL = Path(__file__).parent.parent / "fixtures" / "real"


@pytest.mark.parametrize(
    ("unit_file_value", "printed"),
    [
        ("5-9,15-19", "5-9 15-19"),
        ("5-9 15-19", "5-9 15-19"),
        ("15,16,17,5,6,7,8,9,18,19", "5-9 15-19"),
        ("3 4 5 6 7", "3-7"),  # systemd-pr12644: CPUAffinity=3 4 5 6 7 prints as a range now
        ("0", "0"),
        ("1,3,5", "1 3 5"),
        ("", ""),
        ("9-5", ""),
        ("x-3", ""),
        ("5-99999999999", ""),
    ],
)
def test_cpu_sets_print_as_systemd_prints_them(unit_file_value: str, printed: str) -> None:
    assert cmd_systemd.cpu_range_string(unit_file_value) == printed


def test_allowed_cpus_form_is_the_real_one() -> None:
    sample = REAL / ("SECONDBEST__systemctl_show_-p_UnitFileState_-p_ActiveState_-p_AllowedCPUs"
                     "__4services+slice.txt")
    assert "AllowedCPUs=" + cmd_systemd.cpu_range_string("5-9,15-19") in sample.read_text().splitlines()


def _sample_fields(name: str) -> list[tuple[str, str]]:
    """A real modinfo sample as (key, value) pairs, continuation lines joined."""
    rows: list[tuple[str, str]] = []
    for line in (REAL / name).read_text().splitlines():
        if line[:1] in (" ", "\t"):
            rows[-1] = (rows[-1][0], rows[-1][1] + line.strip())
        else:
            key, _, value = line.partition(":")
            rows.append((key, value.strip()))
    return rows


def test_signature_wraps_as_kmod_prints_it() -> None:
    name = "modinfo_hailo_pci__aarch64_dkms_signed.txt"
    signature = dict(_sample_fields(name))["signature"]
    lines = (REAL / name).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("signature:"))
    real = "\n".join(lines[start : start + 13])
    assert modfile.render_field("signature", signature) == real


def test_empty_fields_print_their_key_alone() -> None:
    assert modfile.render_field("depends", "") == "depends:"
    assert modfile.render_field("sig_key", "40:8B") == "sig_key:        40:8B"


#: fields whose place kmod fixes (license/description/author follow the module's source)
PLACED = ("filename", "srcversion", "depends", "name", "vermagic", "sig_id", "signer", "sig_key",
          "sig_hashalgo", "signature", "parm")


@pytest.mark.parametrize(
    "name",
    ["modinfo_hailo_pci__aarch64_dkms_signed.txt", "modinfo_soundcore_signed__tab_continuation__kmod-28.txt",
     "modinfo_nvidia_uvm__dkms_build_driver_version__nvidia-vaapi-driver-260.txt"],
)
def test_field_order_is_kmods(name: str) -> None:
    """The placed fields of the real samples come in FIELD_ORDER's order."""
    keys = [k for k, _ in _sample_fields(name) if k in PLACED]
    ranks = [modfile.FIELD_ORDER.index(k) for k in keys]
    assert ranks == sorted(ranks)


def test_certificate_fields_from_the_real_mokutil_listing() -> None:
    text = (REAL / "mokutil_--list-enrolled__ubuntu22.04_linux-surface-906.txt").read_text()
    first = text.split("[key 2]")[0]
    fields = cmd_secureboot.certificate_fields(first)
    assert fields["serial"] == "B9:41:24:A0:18:2C:92:67"
    assert cmd_secureboot.common_name(fields["issuer"]) == "Canonical Ltd. Master Certificate Authority"


def test_short_serials_read_as_openssl_prints_them() -> None:
    fields = cmd_secureboot.certificate_fields("        Serial Number: 4660 (0x1234)\n")
    assert fields["serial"] == "12:34"


def test_factory_canonical_key_is_the_real_one() -> None:
    enrolled = image.factory_firmware()["enrolled"]
    assert isinstance(enrolled, list)
    key = enrolled[0]
    real = (REAL / "mokutil_--list-enrolled__ubuntu22.04_linux-surface-906.txt").read_text()
    assert f"SHA1 Fingerprint: {key['fingerprint']}" in real
    serial = cmd_secureboot.certificate_fields(key["text"])["serial"]
    assert serial == key["serial"] == "B9:41:24:A0:18:2C:92:67"


@pytest.mark.parametrize(
    ("fault", "sample", "enforcing"),
    [
        (None, "mokutil_--sb-state__enabled.txt", True),
        ("sb-not-enforcing", "mokutil_--sb-state__enabled_validation_disabled_in_shim.txt", False),
        ("sb-setup-mode", "mokutil_--sb-state__disabled_setup_mode.txt", False),
    ],
)
def test_sb_state_lines_are_the_real_ones(fault: str | None, sample: str, enforcing: bool) -> None:
    flt = {fault: True} if fault else {}
    fw = {"secure_boot": True}
    assert cmd_secureboot.sb_state(fw, flt) == (REAL / sample).read_text().splitlines()
    assert cmd_secureboot.enforcing(fw, flt) is enforcing


def test_no_efi_message_is_the_real_one() -> None:
    real = (REAL / "mokutil__efi_variables_not_supported__darling-1025.txt").read_text()
    assert real == cmd_secureboot.NO_EFI + "\n"
    assert not cmd_secureboot.enforcing({"secure_boot": True}, {"no-efi": True})


def test_dgx_release_has_the_real_shape() -> None:
    """DGX OS 7 numbering; the same keys in the same order, blank line before the OTA pair."""
    real = (REAL / "etc_dgx-release__DGX_Spark_dgxspark03_OTA7.5.0.txt").read_text()
    ours = image.dgx_release("spark1")

    def shape(text: str) -> list[str]:
        return [line.split("=", 1)[0] for line in text.splitlines()]

    assert shape(ours) == shape(real)
    assert 'DGX_OTA_VERSION="7.' in ours and ours != image.dgx_release("spark2")


def test_nvidia_smi_summary_is_the_real_gb10_table() -> None:
    from sparkbase_lab.shims.cmd_gpu import SUMMARY

    real = (REAL / "nvidia-smi__summary_table__GB10__k8s-device-plugin-1482.txt").read_text().splitlines()
    ours = SUMMARY.format(driver=f"{'580.95.05':<23}", driver2=f"{'580.95.05':<15}", power=f"{'4W':>16}",
                          perf="P8", temp="40").splitlines()
    assert ours[: len(real)] == real


def test_nvidia_smi_queries_print_as_on_a_gb10(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from sparkbase_lab.shims import cmd_gpu

    monkeypatch.setattr(cmd_gpu, "_utils_version", lambda: "580.159.03")
    monkeypatch.setattr(cmd_gpu, "state", lambda: {"driver": "580.159.03"})
    monkeypatch.setattr(cmd_gpu, "faults", dict)
    name = "nvidia-smi__query-gpu_name,driver_version,memory.total,memory.used,memory.free__csv__GB10.txt"
    query = "--query-gpu=name,driver_version,memory.total,memory.used,memory.free"
    assert cmd_gpu.cmd_nvidia_smi([query, "--format=csv,noheader"]) == 0
    assert capsys.readouterr().out == (REAL / name).read_text()
    monkeypatch.setattr(cmd_gpu, "state", lambda: {"driver": "580.173.02"})
    monkeypatch.setattr(cmd_gpu, "_utils_version", lambda: "580.178.04")
    assert cmd_gpu.cmd_nvidia_smi([]) == 18
    assert capsys.readouterr().out == (REAL / "nvidia-smi__driver_library_mismatch_580.txt").read_text()


def test_cpuinfo_blocks_are_the_real_ones() -> None:
    from sparkbase_lab import boot

    real = (REAL / "proc_cpuinfo__GB10_DellProMax__processors0-1__arm-socs-table-133.txt").read_text()
    ours = boot.cpuinfo_text()
    assert ours.startswith(real.rstrip("\n") + "\n")


@pytest.mark.parametrize(("written", "shown"), [
    ("30s", "30s"), ("30", "30s"), ("600s", "10min"), ("10min", "10min"), ("90s", "1min 30s"),
    ("off", "0"), ("0", "0"), ("2h", "2h"), ("infinity", "infinity"),
])
def test_manager_time_spans_print_as_systemctl_show_does(written: str, shown: str) -> None:
    """systemctl show normalises a span (the real sample: RuntimeWatchdogSec=60s shows 1min)."""
    assert cmd_systemd.timespan(written) == shown


def test_manager_watchdog_properties_read_like_the_real_sample(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from sparkbase.facts.parsers.host import parse_manager_properties

    conf = {"/etc/systemd/system.conf": "[Manager]\n#RuntimeWatchdogSec=off\n",
            "dropin": "[Manager]\nRuntimeWatchdogSec=60s\nRebootWatchdogSec=10min\n"}
    monkeypatch.setattr(cmd_systemd, "read_text", lambda path: conf.get(path, ""))
    monkeypatch.setattr(cmd_systemd, "sorted_conf", lambda _pattern: [conf["dropin"]])
    monkeypatch.setattr(cmd_systemd, "read_json", lambda _path, default: default)
    monkeypatch.setattr(cmd_systemd, "write_json", lambda _path, _data: None)
    assert cmd_systemd.cmd_systemctl(["show", "-p", "RuntimeWatchdogUSec", "-p", "RebootWatchdogUSec"]) == 0
    ours = parse_manager_properties(capsys.readouterr().out)
    name = "systemctl_show_-p_RebootWatchdogUSec_-p_RuntimeWatchdogUSec__1min_10min__lpic-notes.txt"
    real = parse_manager_properties((REAL / name).read_text())
    assert ours == {key: real[key] for key in ("RuntimeWatchdogUSec", "RebootWatchdogUSec")}


@pytest.mark.parametrize("fault", [None, "pxe-first"])
def test_efibootmgr_reads_with_the_parser_of_real_samples(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str],
                                                          fault: str | None) -> None:
    from sparkbase.facts.parsers.host import parse_efibootmgr
    from sparkbase_lab.shims import cmd_hw

    monkeypatch.setattr(cmd_hw, "faults", lambda: {fault: True} if fault else {})
    monkeypatch.setattr(cmd_hw, "node_info", lambda: {"name": "spark1"})
    for argv in ([], ["-v"]):
        assert cmd_hw.cmd_efibootmgr(argv) == 0
        boot = parse_efibootmgr(capsys.readouterr().out)
        ubuntu = boot.find("ubuntu")
        assert ubuntu is not None and ubuntu.number == "0001"
        first = boot.entry(boot.order[0])
        assert first is not None and (first.label.startswith("UEFI PXEv4") if fault else first == ubuntu)


def test_drm_clients_print_as_a_7_0_kernel_does() -> None:
    """The header is the real one (the sample's mail quote is one column wider); the fault's row
    has the real row's columns and reads as master."""
    from sparkbase.facts.parsers.host import DrmClient, parse_drm_clients_file
    from sparkbase_lab.shims.sysfs import DRM_CLIENTS_HEADER, DRM_MASTER_ROW

    name = "sys_kernel_debug_dri_0_clients__name_client-id_columns_logind_master__amd-gfx-2025.txt"
    real = (REAL / name).read_text().splitlines()
    assert real[0][1:] + "\n" == DRM_CLIENTS_HEADER
    assert len(DRM_MASTER_ROW) == len(real[1])
    assert parse_drm_clients_file(DRM_CLIENTS_HEADER) == ()
    assert parse_drm_clients_file(DRM_CLIENTS_HEADER + DRM_MASTER_ROW) == (DrmClient("Xorg", 2210, True),)
