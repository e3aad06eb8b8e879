"""Every check sparkbase runs, each a pure function of (expected, facts, item).

Ids read as the drift they name. Areas follow the prior `doctor`: kernel, memory, driver,
nccl, fabric, secure_boot, host, cpuset, files, packages, gpu, fleet.
"""

from __future__ import annotations

import ipaddress

from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, fail, fleet_check, node_check, ok, skip
from sparkbase.facts.model import NodeFacts, SecureBoot
from sparkbase.facts.parsers import dgx_os_version, format_cpu_list, parse_kv_conf
from sparkbase.facts.signing import SignatureProblem, judge_signature
from sparkbase.policy.gpu_clock import LATCH_CLOCK_MHZ, ClockState, in_latch_band, judge_clock
from sparkbase.render import NCCL_CONF_PATH, NETPLAN_PATH, kernel_cmdline

LATCH_FIX = "full AC disconnect (unplug power), then re-run"
THROTTLE_FIX = "remove the named cause (power cap, cooling), then re-run"
LOW_CLOCK_FIX = "low clock under load with no reason: check the node's power supply, then re-run"
APPLY_FIX = "sparkbase apply --limit {node}"
REBOOT_FIX = "sparkbase apply --limit {node} --allow-reboot"
#: the kernel argument that pins NVMe APST off (`host.nvme.apst: disabled`)
APST_ARG = "nvme_core.default_ps_max_latency_us=0"


def _apply(expected: Expected, reboot: bool = False) -> str:
    return (REBOOT_FIX if reboot else APPLY_FIX).format(node=expected.node)


def _unknown(facts: NodeFacts, section: str, what: object) -> Outcome:
    """A fact the node could not report: fail, saying why."""
    reason = facts.errors.get(section, "not reported")
    return fail(what, f"unknown ({reason})", "check the node by hand; the fact could not be read")


# --- kernel -------------------------------------------------------------------------


@node_check("kernel.release", "kernel", "the running kernel is the baseline's")
def kernel_release(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    want = expected.baseline.kernel.release
    if facts.kernel_release is None:
        return _unknown(facts, "uname", want)
    if facts.kernel_release != want:
        return fail(want, facts.kernel_release, f"install and boot it: {_apply(expected, reboot=True)}")
    return ok(want, facts.kernel_release)


@node_check("kernel.page_size", "kernel", "the running page size is the baseline's")
def kernel_page_size(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    want = expected.baseline.kernel.page_size
    if facts.page_size is None:
        return _unknown(facts, "pagesize", want)
    if facts.page_size != want:
        return fail(want, facts.page_size, f"boot the baseline's kernel flavour: {_apply(expected, True)}")
    return ok(want, facts.page_size)


@node_check("kernel.cmdline", "kernel", "required kernel arguments present, forbidden ones absent")
def kernel_cmdline_check(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    required = kernel_cmdline(expected.baseline)
    forbidden = expected.baseline.kernel.cmdline_forbid
    if not facts.cmdline:
        return _unknown(facts, "cmdline", " ".join(required))
    missing = [arg for arg in required if arg not in facts.cmdline]
    present = [arg for arg in facts.cmdline if _forbidden(arg, forbidden)]
    want = " ".join(required) + (f" (never: {' '.join(forbidden)})" if forbidden else "")
    if missing or present:
        problems = [*(f"missing {arg}" for arg in missing), *(f"forbidden {arg}" for arg in present)]
        fix = f"rewrite the GRUB drop-in and reboot: {_apply(expected, True)}"
        if APST_ARG in missing:
            fix = (f"NVMe APST is not pinned off ({APST_ARG} missing; APST sleep costs about 3% "
                   f"at 8 streams): {fix}")
        return fail(want, "; ".join(problems), fix)
    return ok(want, " ".join(facts.cmdline))


def _forbidden(arg: str, forbidden: list[str]) -> bool:
    """`arg` is forbidden by name (`splash`) or exactly (`kho=off`)."""
    return arg in forbidden or any("=" not in rule and arg.split("=")[0] == rule for rule in forbidden)


@node_check(
    "boot.grub_default", "kernel", "GRUB has an entry for the kernel and boots it next and by default"
)
def boot_grub_default(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    release = expected.baseline.kernel.release
    want = f"an entry for {release}; the next and the normal boot take it"
    grub = facts.grub
    if grub is None:
        return _unknown(facts, "grub-cfg", want)
    reapply = f"rewrite the GRUB drop-in and run update-grub: {_apply(expected)}"
    if not any(e.release == release and not e.recovery for e in grub.entries):
        booted = sorted({e.release for e in grub.entries if e.release})
        return fail(want, f"no GRUB entry for {release} (entries: {', '.join(booted) or 'none'})",
                    f"install the kernel and run update-grub: {_apply(expected, True)}")
    problems: list[str] = []
    fixes: list[str] = []
    if grub.oneshot is not None and (grub.oneshot_entry is None or grub.oneshot_entry.release != release):
        boots = grub.oneshot_entry.release if grub.oneshot_entry else "no entry (GRUB falls back to entry 0)"
        problems.append(f"one-shot next_entry {grub.oneshot!r} (grub-reboot) boots {boots} next")
        fixes.append("grub-editenv /boot/grub/grubenv unset next_entry")
    if grub.default_entry is None or grub.default_entry.release != release:
        boots = grub.default_entry.release if grub.default_entry else "no such entry (GRUB falls back to 0)"
        problems.append(f"default {grub.default!r} boots {boots}")
        fixes.append(reapply)
    if problems:
        return fail(want, "; ".join(problems) + " (the next reboot changes kernel)", "; then ".join(fixes))
    return ok(want, f"default {grub.default!r} boots {release}")


# --- driver and GPU -----------------------------------------------------------------


@node_check("driver.version", "driver", "nvidia-smi reports the baseline's driver")
def driver_version(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    want = expected.baseline.driver.version
    if facts.gpu.error is not None:
        return fail(
            want, facts.gpu.error, f"install the driver for the running kernel: {_apply(expected, True)}"
        )
    if facts.gpu.driver_version != want:
        return fail(want, facts.gpu.driver_version, f"install driver {want}: {_apply(expected, True)}")
    return ok(want, facts.gpu.driver_version)


@node_check("gpu.clock", "gpu", "the GPU is not clock-latched (under load: SM clock at least 1000 MHz)")
def gpu_clock(_expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    want = f">= {LATCH_CLOCK_MHZ} MHz"
    judgement = judge_clock(facts.gpu)
    state, observed = judgement.state, judgement.reading
    if state is ClockState.UNKNOWN:
        return skip(f"no SM clock reading ({observed})")
    if state is ClockState.LATCHED:
        return fail(want, observed + " (clock latch)", LATCH_FIX)
    if state is ClockState.THROTTLED:
        return fail(want, observed + " (throttled, not the latch)", THROTTLE_FIX)
    if state is ClockState.LOW:
        return fail(want, observed + " (low under load, outside the latch's 9-11 W)", LOW_CLOCK_FIX)
    if state is ClockState.IDLE:
        if in_latch_band(facts.gpu):
            return ok(want, observed + " (idle: not judged; in the latch's 9-11 W with no reason, "
                      "a load probe at launch would tell)")
        return ok(want, observed + " (idle: not a latch)")
    return ok(want, observed)


# --- NCCL ---------------------------------------------------------------------------


@node_check("nccl.library", "nccl", "the NCCL library every lane loads has the pinned sha256")
def nccl_library(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    library = expected.baseline.nccl.library
    seen = facts.file_sha256.get(library.path)
    if seen != library.sha256:
        observed = f"sha256 {seen}" if seen else f"{library.path} missing"
        return fail(
            f"{library.path} sha256 {library.sha256}",
            observed,
            f"install {library.package}={library.version}: {_apply(expected)}",
        )
    return ok(library.sha256, seen)


@node_check("nccl.conf", "nccl", "/etc/nccl.conf is exactly the rendered settings")
def nccl_conf(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    rendered = expected.file(NCCL_CONF_PATH)
    if rendered is None:
        return skip("the baseline renders no nccl.conf")
    seen = facts.file_sha256.get(NCCL_CONF_PATH)
    if seen == rendered.sha256:
        return ok(rendered.sha256, seen)
    want = parse_kv_conf(rendered.content)
    if facts.nccl_conf is None:
        return fail(_env_text(want), f"{NCCL_CONF_PATH} missing", _apply(expected))
    have = parse_kv_conf(facts.nccl_conf)
    keys = [key for key in sorted(set(want) | set(have)) if want.get(key) != have.get(key)]
    if not keys:
        return fail(
            _env_text(want),
            "same settings, different file (comments or layout)",
            f"rewrite it: {_apply(expected)}",
        )
    return fail(
        "; ".join(f"{key}={want.get(key, '(unset)')}" for key in keys),
        "; ".join(f"{key}={have.get(key, '(unset)')}" for key in keys),
        f"rewrite it: {_apply(expected)}",
    )


def _env_text(env: dict[str, str]) -> str:
    return "; ".join(f"{key}={value}" for key, value in env.items())


# --- fabric -------------------------------------------------------------------------


@node_check("fabric.netplan", "fabric", "the four-PF fabric netplan is the rendered one")
def fabric_netplan(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    rendered = expected.file(NETPLAN_PATH)
    if rendered is None:
        return skip("no fabric netplan rendered")
    seen = facts.file_sha256.get(NETPLAN_PATH)
    if seen != rendered.sha256:
        return fail(
            f"{NETPLAN_PATH} sha256 {rendered.sha256}",
            f"sha256 {seen}" if seen else "missing",
            f"rewrite and netplan apply: {_apply(expected)}",
        )
    return ok(rendered.sha256, seen)


def _netdevs(expected: Expected) -> list[str]:
    return [port.netdev for port in expected.baseline.fabric.ports]


def _hcas(expected: Expected) -> list[str]:
    return expected.baseline.fabric.hca_names()


@node_check("fabric.link", "fabric", "each fabric netdev is up, at the MTU, with its address", items=_netdevs)
def fabric_link(expected: Expected, facts: NodeFacts, item: str | None) -> Outcome:
    netdev = str(item)
    mtu = expected.baseline.fabric.mtu
    cable = expected.cables.get(netdev)
    want = f"UP, mtu {mtu}" + (f", {cable.address}" if cable else "")
    if not facts.interfaces:
        return _unknown(facts, "ip-addr", want)
    iface = facts.interfaces.get(netdev)
    if iface is None:
        return fail(want, "no such netdev", "check the ConnectX-7 (lspci, rdma link)")
    observed = f"{iface.operstate}, mtu {iface.mtu}, {', '.join(iface.addresses) or 'no address'}"
    problems = []
    if iface.operstate != "UP":
        problems.append("link down")
    if iface.mtu != mtu:
        problems.append("MTU")
    if cable is not None and cable.address not in iface.addresses:
        problems.append("address")
    if problems:
        fix = (
            "check the cable and the peer port; then re-run"
            if problems == ["link down"]
            else f"netplan apply the fabric file: {_apply(expected)}"
        )
        return fail(want, observed, fix)
    return ok(want, observed)


@node_check("fabric.rdma", "fabric", "every RDMA device exists", items=_hcas)
def fabric_rdma(_expected: Expected, facts: NodeFacts, item: str | None) -> Outcome:
    if item in facts.rdma_devices:
        return ok("present", "present")
    return fail(
        "present",
        f"missing (have: {', '.join(facts.rdma_devices) or 'none'})",
        "check the ConnectX-7 and mlx5_ib (rdma link show)",
    )


@node_check(
    "fabric.gid", "fabric", "the node's GID index holds the IPv4 RoCE v2 address in the path's own subnet",
    items=_hcas,
)
def fabric_gid(expected: Expected, facts: NodeFacts, item: str | None) -> Outcome:
    hca = str(item)
    index = expected.gid_index
    netdev = next(port.netdev for port in expected.baseline.fabric.ports if port.hca == hca)
    cable = expected.cables.get(netdev)
    want_ip = cable.address.split("/")[0] if cable else None
    want = f"index {index}: RoCE v2 {want_ip or 'IPv4'}" + (f" in {cable.subnet}" if cable else "")
    gid = facts.gids.get(hca)
    if gid is None or gid.gid is None:
        return fail(want, f"no GID at index {index}", "check the link (rdma link show), then re-run")
    address = gid.ipv4
    observed = f"{gid.type or 'no type'} {address or gid.gid}"
    fix = (
        f"the RoCE v2 IPv4 GID moved off index {index} (link flap?): bounce the link "
        f"(ip link set {netdev} down; ip link set {netdev} up) or re-apply the netplan, then re-run"
    )
    if gid.type != "RoCE v2" or address is None:
        return fail(want, observed, fix)
    if cable is not None and ipaddress.IPv4Address(address) not in ipaddress.IPv4Network(cable.subnet):
        return fail(
            want, observed + f" (outside {cable.subnet})", f"fix the address on {netdev}: {_apply(expected)}"
        )
    if want_ip is not None and address != want_ip:
        return fail(want, observed, f"fix the address on {netdev}: {_apply(expected)}")
    return ok(want, observed)


# --- memory -------------------------------------------------------------------------


@node_check("memory.thp", "memory", "transparent huge pages in the baseline's mode")
def memory_thp(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    want = expected.baseline.memory.transparent_hugepages
    if facts.thp is None:
        return _unknown(facts, "thp", want)
    if facts.thp != want:
        return fail(
            want,
            facts.thp,
            f"set transparent_hugepage={want} on the kernel command line: {_apply(expected, True)}",
        )
    return ok(want, facts.thp)


def _sysctl_keys(expected: Expected) -> list[str]:
    return sorted(expected.baseline.memory.sysctls)


@node_check("sysctl", "memory", "each sysctl the baseline sets has its value", items=_sysctl_keys)
def sysctl(expected: Expected, facts: NodeFacts, item: str | None) -> Outcome:
    key = str(item)
    want = expected.baseline.memory.sysctls[key]
    seen = facts.sysctls.get(key)
    if seen is None:
        return _unknown(facts, f"sysctl:{key}", want)
    if " ".join(seen.split()) != " ".join(want.split()):
        return fail(want, seen, f"sysctl -w {key}={want} and keep it in sysctl.d: {_apply(expected)}")
    return ok(want, seen)


@node_check("memory.swap", "memory", "the swap file is active at its size with the right header")
def memory_swap(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    swap = expected.baseline.memory.swap
    if swap is None:
        return skip("the baseline has no swap file")
    size = swap.size_gib * 1024**3
    want = f"{swap.path} active, {swap.size_gib} GiB, header page size {swap.header_page_size}"
    entry = next((s for s in facts.swaps if s.name == swap.path), None)
    header = facts.swap_header_page_size.get(swap.path)
    problems = []
    if entry is None:
        problems.append("not active")
    elif entry.size_bytes not in (size, size - swap.header_page_size):
        # the kernel counts the usable area: the file less its header page (real swapon and
        # /proc/swaps show 16 GiB - 64 KiB for a 16 GiB file made with `mkswap -p 65536`)
        problems.append(f"size {entry.size_bytes} bytes")
    if header != swap.header_page_size:
        problems.append(f"header page size {header or 'none (no swap signature)'}")
    if problems:
        return fail(
            want, "; ".join(problems), f"recreate it (mkswap -p {swap.header_page_size}): {_apply(expected)}"
        )
    return ok(want, f"{swap.path} active, {size} bytes, header {header}")


@node_check("memory.swap.fstab", "memory", "the swap file is in /etc/fstab, so it comes back at boot")
def memory_swap_fstab(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    swap = expected.baseline.memory.swap
    if swap is None:
        return skip("the baseline has no swap file")
    want = f"{swap.path} none swap sw 0 0"
    if facts.fstab is None:
        return _unknown(facts, "fstab", want)
    lines = [e for e in facts.fstab if e.spec == swap.path]
    if not any(e.vfstype == "swap" for e in lines):
        seen = "; ".join(f"{e.spec} {e.file} {e.vfstype} {e.options}" for e in lines) or "not listed"
        return fail(want, seen + " (swap is lost at the next boot)", f"add the swap line: {_apply(expected)}")
    return ok(want, f"{swap.path} listed as swap")


@node_check(
    "memory.swap.foreign_fstab",
    "memory",
    "no swap file of another baseline is in /etc/fstab (it would come back at boot)",
    severity="warn",
)
def memory_swap_foreign_fstab(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    if not expected.foreign_swaps:
        return skip("no other baseline has a swap file")
    want = "none of " + ", ".join(expected.foreign_swaps)
    if facts.fstab is None:
        return _unknown(facts, "fstab", want)
    found = [e.spec for e in facts.fstab if e.spec in expected.foreign_swaps and e.vfstype == "swap"]
    if found:
        return fail(want, [f"{path} (swap)" for path in found],
                    f"retire it (swapoff, drop the fstab line, delete the file): {_apply(expected)}")
    return ok(want, "none listed")


# --- memory-saver -------------------------------------------------------------------


def _saver_items(expected: Expected) -> list[str]:
    saver = expected.baseline.memory.memory_saver
    if saver is None:
        return []
    return ["dkms", "signature", "loaded"] if saver.required else ["loaded"]


@node_check(
    "memory_saver",
    "memory",
    "the memory-saver module is built, signed and loaded (if required)",
    items=_saver_items,
)
def memory_saver(expected: Expected, facts: NodeFacts, item: str | None) -> Outcome:
    saver = expected.baseline.memory.memory_saver
    if saver is None:
        return skip("no memory-saver module in the baseline")
    release = facts.kernel_release
    loaded_src = facts.nvidia_modules.get(f"{saver.module}.srcversion")
    if not saver.required:
        patched = saver.module in facts.modules and (
            saver.srcversion is None or loaded_src == saver.srcversion)
        if patched:
            return fail("not loaded", "loaded", f"dkms remove {saver.dkms_name}/{saver.dkms_version} --all")
        return ok("not loaded", "not loaded")
    if item == "dkms":
        want = f"{saver.dkms_name}/{saver.dkms_version} installed for {release}"
        entry = next(
            (
                e
                for e in facts.dkms
                if e.name == saver.dkms_name
                and e.version == saver.dkms_version
                and e.kernel == release
                and e.status == "installed"
            ),
            None,
        )
        noise = f" (dkms also said: {'; '.join(facts.dkms_noise)})" if facts.dkms_noise else ""
        if entry is None:
            seen = ", ".join(f"{e.name}/{e.version} {e.kernel or ''} {e.status}" for e in facts.dkms)
            return fail(
                want,
                (seen or "not installed") + noise,
                f"dkms install {saver.dkms_name}/{saver.dkms_version} -k {release}: {_apply(expected)}",
            )
        return ok(want, "installed" + noise)
    if item == "signature":
        key = expected.baseline.secure_boot.mok_fingerprint
        want = f"signed with MOK {key}" if key else "signed with an enrolled MOK"
        verdict = judge_signature(facts.memory_saver, facts.mok_certificates, key)
        if verdict.ok:
            return ok(want, verdict.detail)
        if verdict.problem is SignatureProblem.UNSIGNED:
            return fail(want, "unsigned", "rebuild with the MOK key present: " + _apply(expected))
        return fail(want, verdict.detail, "re-sign with the enrolled MOK key: " + _apply(expected))
    param = f"{saver.module}.{saver.packing_parameter}"
    want = f"{saver.module} loaded, {saver.packing_parameter}={'on' if saver.packing else 'off'}"
    if saver.module not in facts.modules:
        return fail(
            want, "not loaded", "check boot.log / dmesg for a signature refusal; " + _apply(expected, True)
        )
    if saver.srcversion is not None and loaded_src != saver.srcversion:
        return fail(
            f"{want}, srcversion {saver.srcversion}",
            f"srcversion {loaded_src or 'unknown'} (the stock module?)",
            "install the patched module for this kernel and reboot: " + _apply(expected, True),
        )
    value = facts.module_params.get(param)
    if _flag(value) != saver.packing:
        return fail(want, f"{saver.packing_parameter}={value}", _apply(expected, True))
    src = f", srcversion {loaded_src}" if saver.srcversion is not None else ""
    return ok(want, f"loaded{src}, {saver.packing_parameter}={value}")


def _flag(value: str | None) -> bool | None:
    """A module parameter as the kernel prints it (`Y`/`N`/`1`/`0`)."""
    if value is None:
        return None
    return value.strip().upper() in {"Y", "1", "ON", "TRUE"}


# --- Secure Boot --------------------------------------------------------------------


@node_check("secure_boot.state", "secure_boot", "Secure Boot is in the baseline's state")
def secure_boot_state(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    want = SecureBoot.ENABLED.value if expected.baseline.secure_boot.enabled else "not enforcing"
    state = facts.secure_boot
    if state is None:
        return _unknown(facts, "sb-state", want)
    firmware = "change it in the firmware setup (a person at the console)"
    if not expected.baseline.secure_boot.enabled:
        if state.enforcing:
            return fail(want, state.value, firmware)
        return ok(want, state.value)
    if state is SecureBoot.NOT_ENFORCING:
        return fail(want, state.value + " (module signatures are not checked)",
                    "re-enable shim validation: mokutil --enable-validation, then reboot and "
                    "confirm at the console")
    if state is not SecureBoot.ENABLED:
        return fail(want, state.value, firmware)
    return ok(want, state.value)


def _mok_items(expected: Expected) -> list[str]:
    secure = expected.baseline.secure_boot
    saver = expected.baseline.memory.memory_saver
    signs = secure.enabled and saver is not None and saver.required
    return ["mok"] if secure.mok_fingerprint or signs else []


@node_check("secure_boot", "secure_boot", "the MOK key the baseline signs with is enrolled", items=_mok_items)
def secure_boot_mok(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    key = expected.baseline.secure_boot.mok_fingerprint
    enroll = "mokutil --import the MOK certificate, then reboot and accept it: " + _apply(expected, True)
    enrolled = ", ".join(facts.mok_fingerprints) or "no key enrolled"
    if key is not None:
        return ok(key, key) if key in facts.mok_fingerprints else fail(key, enrolled, enroll)
    # no pinned key (a site still to confirm its own): the key that signed the module
    want = "the key that signed the memory-saver module"
    info = facts.memory_saver
    if info is None or info.error or not info.sig_key:
        return skip("no MOK is pinned and no signed module names one (see memory_saver.signature)")
    verdict = judge_signature(info, facts.mok_certificates, None)
    if verdict.ok and verdict.certificate is not None:
        return ok(want, f"MOK {verdict.certificate.fingerprint} enrolled")
    return fail(want, f"{verdict.detail}; enrolled: {enrolled}", enroll)


# --- host ---------------------------------------------------------------------------


@node_check("host.nvidia_drm", "host", "nvidia-drm modeset and fbdev as the baseline says")
def host_nvidia_drm(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    drm = expected.baseline.host.nvidia_drm
    want = f"modeset={'Y' if drm.modeset else 'N'} fbdev={'Y' if drm.fbdev else 'N'}"
    modeset, fbdev = (
        facts.module_params.get("nvidia_drm.modeset"),
        facts.module_params.get("nvidia_drm.fbdev"),
    )
    seen = f"modeset={modeset or '?'} fbdev={fbdev or '?'}"
    if _flag(modeset) != drm.modeset or _flag(fbdev) != drm.fbdev:
        return fail(want, seen, "write modprobe.d and reboot: " + _apply(expected, True))
    return ok(want, seen)


@node_check("host.boot_target", "host", "the default systemd target is the baseline's")
def host_boot_target(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    want = expected.baseline.host.boot_target
    if facts.default_target is None:
        return _unknown(facts, "default-target", want)
    if facts.default_target != want:
        return fail(want, facts.default_target, f"systemctl set-default {want}: {_apply(expected)}")
    return ok(want, facts.default_target)


@node_check("host.display_manager", "host", "no display manager runs on a headless node")
def host_display_manager(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    if expected.baseline.host.display_manager:
        return skip("the baseline allows a display manager")
    state = facts.units.get("display-manager.service")
    if state is None:
        return _unknown(facts, "units", "inactive")
    if state.active:
        return fail("inactive", state.active_state, "disable the display manager: " + _apply(expected))
    return ok("inactive", state.active_state or "inactive")


def _disabled_units(expected: Expected) -> list[str]:
    return list(expected.baseline.host.disable_services)


@node_check(
    "service", "host", "each unit the baseline disables is disabled and stopped", items=_disabled_units
)
def service_disabled(expected: Expected, facts: NodeFacts, item: str | None) -> Outcome:
    state = facts.units.get(str(item))
    if state is None:
        return _unknown(facts, "units", "disabled, inactive")
    seen = f"{state.unit_file_state or 'not installed'}, {state.active_state or 'inactive'}"
    if state.unit_file_state == "enabled" or state.active:
        return fail("disabled, inactive", seen, f"systemctl disable --now {item}: {_apply(expected)}")
    return ok("disabled, inactive", seen)


@node_check("host.fan_control", "host", "the fan-control daemon is enabled and running")
def host_fan_control(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    fan = expected.baseline.host.fan_control
    if fan is None:
        return skip("the baseline has no fan control")
    state = facts.units.get(fan.service)
    want = f"{fan.service} enabled, active"
    if state is None:
        return _unknown(facts, "units", want)
    seen = f"{state.unit_file_state or 'not installed'}, {state.active_state or 'inactive'}"
    if not (state.enabled and state.active):
        return fail(want, seen, f"install {fan.package} and enable {fan.service}: {_apply(expected)}")
    return ok(want, seen)


# --- cpuset -------------------------------------------------------------------------


@node_check("cpuset.slice", "cpuset", "the serving slice is pinned to the fast cores")
def cpuset_slice(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    cpuset = expected.baseline.cpuset
    want = f"{cpuset.slice} AllowedCPUs={cpuset.cpulist()}"
    seen = facts.slice_allowed_cpus
    if seen is None and "units" in facts.errors:
        return _unknown(facts, "units", want)
    if seen != frozenset(cpuset.cpus):
        shown = format_cpu_list(seen) if seen else "(unset)"
        return fail(want, f"AllowedCPUs={shown}", f"write the slice: {_apply(expected)}")
    if facts.fast_cpus and not set(cpuset.cpus) <= set(facts.fast_cpus):
        slow = sorted(set(cpuset.cpus) - set(facts.fast_cpus))
        return fail(want, f"CPUs {slow} are not Cortex-X925 (CPU part 0xd85) here", "fix cpuset.cpus")
    return ok(want, f"AllowedCPUs={format_cpu_list(seen)}")


# --- rendered files and stamp -------------------------------------------------------


_OWN_CHECKS = {NCCL_CONF_PATH, NETPLAN_PATH}


def _other_files(expected: Expected) -> list[str]:
    return [f.path for f in expected.files if f.path not in _OWN_CHECKS and f.path != expected.stamp_path]


@node_check(
    "file", "files", "every other rendered file is byte for byte the rendered one", items=_other_files
)
def rendered_file(expected: Expected, facts: NodeFacts, item: str | None) -> Outcome:
    rendered = expected.file(str(item))
    assert rendered is not None
    seen = facts.file_sha256.get(rendered.path)
    if seen != rendered.sha256:
        return fail(
            f"sha256 {rendered.sha256}",
            f"sha256 {seen}" if seen else "missing",
            f"rewrite it ({rendered.purpose}): {_apply(expected, rendered.needs_reboot)}",
        )
    return ok(rendered.sha256, seen)


@node_check("stamp", "files", "the stamp names the baseline, version and hash the node must carry")
def stamp(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    want_version = expected.baseline.version
    want = f"{expected.baseline_name} {want_version}"
    rendered = expected.file(expected.stamp_path)
    if facts.stamp is None:
        return fail(want, "no stamp (never converged by sparkbase)", _apply(expected, True))
    import json

    want_stamp = json.loads(rendered.content) if rendered else {}
    seen = f"{facts.stamp.get('baseline')} {facts.stamp.get('version')}"
    mismatched = [
        key
        for key in ("baseline", "version", "baseline_sha256", "files_sha256")
        if facts.stamp.get(key) != want_stamp.get(key)
    ]
    if mismatched:
        detail = seen
        if not set(mismatched) & {"baseline", "version"}:
            detail += (
                f" but {', '.join(mismatched)} differ (the baseline changed without a version "
                "bump, or the node was converged from another checkout)"
            )
        return fail(want, detail, _apply(expected, True))
    return ok(want, seen)


@node_check(
    "stamp.assignment", "files", "the node was converged to the baseline the inventory assigns",
    severity="warn",
)
def stamp_assignment(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    assigned = expected.inventory_baseline or expected.baseline_name
    want = f"{assigned} (the inventory's)"
    if expected.baseline_name != assigned:
        want += f"; audited against {expected.baseline_name}"
    if facts.stamp is None:
        return skip("no stamp (the stamp check reports it)")
    seen = str(facts.stamp.get("baseline"))
    if seen == assigned:
        return ok(want, seen)
    if seen == expected.baseline_name:
        fix = (f"the node carries {seen} (apply --baseline): assign it in the inventory, or move the node "
               f"back: {_apply(expected, True)}")
    else:
        fix = f"the node carries neither; converge it: {_apply(expected, True)}"
    return fail(want, f"stamp names {seen}", fix)


# --- OS image (warn) ----------------------------------------------------------------


@node_check("os.release", "host", "the node runs the DGX OS release the baseline was qualified on",
            severity="warn")
def os_release(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    want = expected.baseline.os.release
    wanted = want.split()[-1]  # "DGX OS 26.09" -> "26.09" (a release line: 26.09.x matches)
    if facts.dgx_release is None:
        return fail(want, f"unknown ({facts.errors.get('dgx-release', '/etc/dgx-release missing')})",
                    "not a DGX OS image? check /etc/dgx-release by hand")
    seen = dgx_os_version(facts.dgx_release)
    if seen is None:
        return fail(want, "no DGX_OTA_VERSION or DGX_SWBUILD_VERSION in /etc/dgx-release",
                    "check /etc/dgx-release by hand")
    if seen != wanted and not seen.startswith(wanted + "."):
        if _calendar_numbered(wanted) != _calendar_numbered(seen):
            return fail(want, f"DGX OS {seen} (/etc/dgx-release numbers releases {seen.split('.')[0]}.x; "
                              f"the baseline's {wanted} is another numbering)",
                        "name os.release as /etc/dgx-release does (DGX_OTA_VERSION, e.g. "
                        f"'DGX OS {'.'.join(seen.split('.')[:2])}'): site to confirm which release that is")
        return fail(want, f"DGX OS {seen}",
                    f"update the OS image to {want} (DGX OS OTA; sparkbase does not change the OS)")
    return ok(want, f"DGX OS {seen}")


def _calendar_numbered(version: str) -> bool:
    """`26.09` (year.month, as release notes name DGX OS) rather than `7.5.0` (as
    /etc/dgx-release's DGX_OTA_VERSION does)."""
    major = version.split(".")[0]
    return major.isdigit() and int(major) >= 20


# --- packages (warn) ----------------------------------------------------------------


def _package_names(expected: Expected) -> list[str]:
    return list(dict.fromkeys(pin.name for pin in expected.baseline.packages()))


@node_check(
    "package",
    "packages",
    "each pinned package is installed at its version",
    severity="warn",
    items=_package_names,
)
def package(expected: Expected, facts: NodeFacts, item: str | None) -> Outcome:
    pin = next(pin for pin in expected.baseline.packages() if pin.name == item)
    seen = facts.packages.get(pin.name)
    if seen != pin.version:
        return fail(pin.version, seen or "not installed", f"apt-get install {pin.name}={pin.version}")
    return ok(pin.version, seen)


@node_check(
    "packages.foreign",
    "packages",
    "no package is installed that only the site's other baselines pin",
    severity="warn",
)
def packages_foreign(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    want = "none installed"
    if not expected.foreign_packages:
        return skip("no other baseline pins a package this one does not")
    found = [f"{name} {facts.packages[name]}" for name in expected.foreign_packages if name in facts.packages]
    if found:
        return fail(want, found, f"retire them (kernel packages after the reboot): {_apply(expected, True)}")
    return ok(want, want)


# --- fleet agreement ----------------------------------------------------------------


def _governor(facts: NodeFacts) -> object:
    values = sorted(set(facts.governors.values()))
    return ",".join(values) if values else None


fleet_check("fleet.kernel", "fleet", "every node runs the same kernel", lambda f: f.kernel_release)
fleet_check("fleet.page_size", "fleet", "every node runs the same page size", lambda f: f.page_size)
fleet_check("fleet.driver", "fleet", "every node runs the same driver", lambda f: f.gpu.driver_version)
fleet_check(
    "fleet.nccl_library",
    "fleet",
    "every node loads the same NCCL library",
    lambda f: f.nccl_library_sha256,
)
fleet_check("fleet.thp", "fleet", "every node has the same THP mode", lambda f: f.thp)
fleet_check(
    "fleet.secure_boot", "fleet", "every node has the same Secure Boot state", lambda f: f.secure_boot
)
fleet_check("fleet.governor", "fleet", "every node runs the same CPU governor", _governor)
fleet_check(
    "fleet.min_free_kbytes",
    "fleet",
    "every node keeps the same free-memory reserve (vm.min_free_kbytes)",
    lambda f: f.sysctls.get("vm.min_free_kbytes"),
)


def _nvidia_modules(facts: NodeFacts) -> object:
    """Loaded NVIDIA modules as `module version/srcversion` (the source they were built from)."""
    names = sorted({key.split(".", 1)[0] for key in facts.nvidia_modules})
    found = [
        f"{name} {facts.nvidia_modules.get(name + '.version', '?')}/"
        f"{facts.nvidia_modules.get(name + '.srcversion', '?')}"
        for name in names
    ]
    return "; ".join(found) or None


fleet_check(
    "fleet.nvidia_modules",
    "fleet",
    "every node loads the same NVIDIA modules, same version, built from the same source",
    _nvidia_modules,
)
