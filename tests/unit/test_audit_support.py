"""Helpers for the audit tests (no tests here): the facts a perfectly converged node reports."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from sparkbase.audit.expected import Expected, expected_for
from sparkbase.facts.model import (
    FstabEntry,
    GpuFacts,
    GrubBoot,
    GrubEntry,
    Interface,
    ModuleInfo,
    MokCertificate,
    NodeFacts,
    SecureBoot,
    SwapEntry,
    UnitState,
)
from sparkbase.facts.parsers.host import ConsoleMode, EfiBoot, EfiEntry
from sparkbase.facts.parsers.kernel import parse_grub
from sparkbase.model.baseline import Baseline
from sparkbase.model.cmdline import rendered_kernel_args
from sparkbase.model.host import GOVERNOR_UNIT, NVME_COALESCING_UNIT, coalescing_value
from sparkbase.model.memory import BOOT_SWAP_UNIT
from sparkbase.model.site import Site, load_site
from sparkbase.model.types import GB10_FAST_CPUS

REPO = Path(__file__).parents[2]
#: the MOK of a converged node as `mokutil --list-enrolled` shows it, and the serial kmod
#: prints as a signed module's `sig_key` (upper-case colon-hex, as kmod prints it)
MOK_SERIAL = "40:8B:66:4E:BC:FF:14:EE:69:A1:B9:19:78:D5:F8:FF:38:3F:21:3A"
MOK_CN = "sparkbase lab MOK (not for production)"
UNPINNED_FINGERPRINT = "0a:1b:2c:3d:4e:5f:60:71:82:93:a4:b5:c6:d7:e8:f9:0a:1b:2c:3d"


def mok_certificate(fingerprint: str | None) -> MokCertificate:
    """The enrolled MOK certificate a converged node lists."""
    return MokCertificate(fingerprint or UNPINNED_FINGERPRINT,
                          MOK_SERIAL.replace(":", "").lower(), MOK_CN, MOK_CN)


def shipped() -> Site:
    return load_site(REPO)


def _gid(address: str) -> str:
    a, b, c, d = (int(x) for x in address.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a << 8 | b:04x}:{c << 8 | d:04x}"


#: what update-grub writes with GRUB_DEFAULT pinned to the baseline's kernel (two kernels
#: installed, the pinned one not the newest), as Ubuntu lays out grub.cfg
GRUB_CFG = (REPO / "tests/fixtures/facts/grub-pinned.cfg.in").read_text()
NEWER_KERNEL = "9.9.0-1001-nvidia"
ADVANCED = "Advanced options for Ubuntu>Ubuntu, with Linux "


def grub_boot(release: str, default: str | None = None, grubenv: str = "") -> GrubBoot:
    """GRUB as a node pinned to `release` has it (or with another `default`, `grubenv`)."""
    cfg = GRUB_CFG.format(
        default=default if default is not None else f"{ADVANCED}{release}",
        newest=NEWER_KERNEL,
        release=release,
    )
    return parse_grub(cfg, grubenv)


def _factory_swap_facts(b: Baseline) -> tuple[tuple[FstabEntry, ...], tuple[SwapEntry, ...]]:
    """The installer's /swap.img line (and its activity) as the baseline keeps it."""
    factory = b.memory.factory_swap
    if factory is None:
        return (), ()
    if factory.fstab == "noauto":
        return (FstabEntry(factory.path, "none", "swap", "noauto"),), ()
    return (FstabEntry(factory.path, "none", "swap", "sw"),), (SwapEntry(factory.path, 8 * 1024**3),)


def _swap_headers(b: Baseline) -> dict[str, int | None]:
    """The header page size of the swap files the audit reads (the installer's: 4 KiB)."""
    headers: dict[str, int | None] = {}
    if b.memory.factory_swap is not None:
        headers[b.memory.factory_swap.path] = 4096
    if b.memory.swap is not None:
        headers[b.memory.swap.path] = b.memory.swap.header_page_size
    return headers


def _with_fallback(grub: GrubBoot, b: Baseline) -> GrubBoot:
    """GRUB's menu with the baseline's fallback kernel's entry too."""
    fallback = b.kernel.fallback
    if fallback is None:
        return grub
    entry = GrubEntry(f"{ADVANCED}{fallback.release}", fallback.release)
    return replace(grub, entries=(*grub.entries, entry))


def _ota_version(release: str) -> str:
    """/etc/dgx-release's DGX_OTA_VERSION on a node of `release` (`DGX OS 7.5` -> 7.5.0, as the
    real samples write it; `DGX OS 26.09.2` as written: how 26.09.2 names itself there has no
    public sample, and the audit matches the baseline's release line either way)."""
    version = release.split()[-1]
    return version if version.count(".") >= 2 else version + ".0"


def converged(expected: Expected) -> NodeFacts:
    """The facts of a node that carries exactly what `expected` says."""
    from sparkbase.audit.expected import Expected as _E  # noqa: F401 - type only

    b = expected.baseline
    saver = b.memory.memory_saver
    modules = {"nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "mlx5_core", "mlx5_ib"}
    params: dict[str, str | None] = {
        "nvidia_drm.modeset": "Y" if b.host.nvidia_drm.modeset else "N",
        "nvidia_drm.fbdev": "Y" if b.host.nvidia_drm.fbdev else "N",
    }
    dkms: tuple[DkmsEntry, ...] = ()
    memory_saver = None
    if saver is not None and saver.required:
        modules.add(saver.module)
        params[f"{saver.module}.{saver.packing_parameter}"] = "Y" if saver.packing else "N"
        from sparkbase.facts.model import DkmsEntry

        dkms = (DkmsEntry(saver.dkms_name, saver.dkms_version, b.kernel.release, "aarch64", "installed"),)
        memory_saver = ModuleInfo(
            filename="/lib/modules/x/updates/dkms/m.ko",
            srcversion=saver.srcversion or "BD5E76800A08DB052331F58",
            signer=MOK_CN, sig_key=MOK_SERIAL, sig_hashalgo="sha512",
        )
    units = {"display-manager.service": UnitState("alias", "inactive")}
    units.update({unit: UnitState("disabled", "inactive") for unit in b.host.disable_services})
    if b.host.cpu_governor is not None:  # DGX OS's governor unit ran and exited (Type=idle)
        units[GOVERNOR_UNIT] = UnitState("enabled", "inactive")
    if b.memory.swap_by_page_size:  # oneshot, RemainAfterExit=yes
        units[BOOT_SWAP_UNIT] = UnitState("enabled", "active")
    units[NVME_COALESCING_UNIT] = (UnitState("enabled", "active") if b.host.nvme.interrupt_coalescing
                                   else UnitState("masked", "inactive"))
    fan_control = None
    if b.host.fan_control is not None:
        fan = b.host.fan_control
        units[fan.service] = UnitState("enabled", "active")
        modules.add(fan.module)
        from sparkbase.facts.model import DkmsEntry

        dkms = (*dkms, DkmsEntry(fan.dkms_name, fan.dkms_version, b.kernel.release, "aarch64", "installed"))
        fan_control = ModuleInfo(filename=f"/lib/modules/x/updates/dkms/{fan.module}.ko",
                                 signer=MOK_CN, sig_key=MOK_SERIAL, sig_hashalgo="sha512")
    interfaces = {
        port.netdev: Interface(
            port.netdev,
            b.fabric.mtu,
            "UP",
            (expected.cables[port.netdev].address,) if port.netdev in expected.cables else (),
        )
        for port in b.fabric.ports
    }
    from sparkbase.facts.model import Gid

    gids = {
        port.hca: Gid(_gid(expected.cables[port.netdev].address.split("/")[0]), "RoCE v2")
        for port in b.fabric.ports
    }
    library = b.nccl.library  # no host file when NCCL is built into the image
    hashes: dict[str, str | None] = {library.path: library.sha256} if library.path is not None else {}
    stamp = None
    for file in expected.files:
        if file.path == expected.stamp_path:
            stamp = json.loads(file.content)
        else:
            hashes[file.path] = file.sha256
    nccl = expected.file("/etc/nccl.conf")
    swap = b.memory.swap
    factory_fstab, factory_swaps = _factory_swap_facts(b)
    return NodeFacts(
        node=expected.node,
        kernel_release=b.kernel.release,
        machine="aarch64",
        page_size=b.kernel.page_size,
        cmdline=(
            "BOOT_IMAGE=/boot/vmlinuz-" + b.kernel.release,
            "root=/dev/nvme0n1p2",
            "ro",
            *rendered_kernel_args(b),
        ),
        fast_cpus=tuple(sorted(GB10_FAST_CPUS)),
        thp=b.memory.transparent_hugepages,
        sysctls=dict(b.memory.sysctls),
        gpu=GpuFacts(b.driver.version, 2418, 35.2),
        modules=frozenset(modules),
        module_params=params,
        dkms=dkms,
        memory_saver=memory_saver,
        fan_control=fan_control,
        secure_boot=SecureBoot.ENABLED if b.secure_boot.enabled else SecureBoot.DISABLED,
        mok_certificates=(mok_certificate(b.secure_boot.mok_fingerprint),),
        swaps=((SwapEntry(swap.path, swap.size_gib * 1024**3),) if swap else ()) + factory_swaps,
        swap_header_page_size=_swap_headers(b),
        default_target=b.host.boot_target,
        efi_boot=EfiBoot("0001", ("0001", "0000"), (EfiEntry("0000", "UEFI Misc Device", True),
                                                      EfiEntry("0001", b.host.uefi_first or "ubuntu", True))),
        drm_drivers={"card0": b.host.drm_driver or "nvidia"},
        drm_clients={"card0": ()},
        console=ConsoleMode("tty1", 0),
        watchdog=({"RuntimeWatchdogUSec": b.host.watchdog.runtime,
                   "RebootWatchdogUSec": b.host.watchdog.reboot}
                  if b.host.watchdog else {"RuntimeWatchdogUSec": "0", "RebootWatchdogUSec": "10min"}),
        units=units,
        slice_allowed_cpus=frozenset(b.cpuset.cpus),
        file_sha256=hashes,
        nccl_library_sha256=b.nccl.library.sha256,
        nccl_conf=nccl.content if nccl else None,
        stamp=stamp,
        interfaces=interfaces,
        rdma_devices=tuple(sorted(b.fabric.hca_names())),
        gids=gids,
        governors=dict.fromkeys(range(20), b.host.cpu_governor or "schedutil"),
        nvme_coalescing=coalescing_value(b.host.nvme.interrupt_coalescing),
        packages={pin.name: pin.version for pin in b.packages()},
        grub=_with_fallback(grub_boot(b.kernel.release), b),
        fstab=(
            FstabEntry("/dev/nvme0n1p2", "/", "ext4", "errors=remount-ro"),
            # under swap_by_page_size the boot unit, not a line, activates the swap file
            *((FstabEntry(swap.path, "none", "swap", "sw"),) if swap and not b.memory.swap_by_page_size
              else ()),
            *factory_fstab,
        ),
        dgx_release={"DGX_SWBUILD_VERSION": "7.2.3", "DGX_OTA_VERSION": _ota_version(b.os.release)},
        nvidia_modules={
            f"{module}.{attr}": b.driver.version if attr == "version" else f"{module.upper()}01"
            for module in ("nvidia", "nvidia_drm", "nvidia_modeset", "nvidia_uvm")
            for attr in ("version", "srcversion")
        } | ({f"{saver.module}.srcversion": saver.srcversion}
             if saver is not None and saver.required and saver.srcversion else {}),
    )


def converged_node(
    site: Site, node: str = "spark1", baseline: str | None = None
) -> tuple[Expected, NodeFacts]:
    """`node` converged to `baseline` (default: its own), the inventory assigning it (as
    after `apply --baseline` and an inventory change: no stamp.assignment warning)."""
    if baseline is not None:
        from sparkbase.deploy.assign import with_assignment

        site = with_assignment(site, [node], baseline)
    expected = expected_for(site, node)
    return expected, converged(expected)


__all__ = ["MOK_SERIAL", "converged", "converged_node", "grub_boot", "mok_certificate", "replace", "shipped"]
