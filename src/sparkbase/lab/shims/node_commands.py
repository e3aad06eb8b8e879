"""The commands of an emulated node, and its boot step (runs inside the node).

Copied into each node as `/usr/local/lib/sparkbase-lab/node_commands.py`; every command in
`/usr/local/bin` is a two-line wrapper calling `main(<command>, argv)`. Runs under the
node's `/usr/bin/python3` with the standard library (plus python3-yaml for netplan).
`node_commands.py __boot__` is the boot step node init runs; `__refresh__` re-applies
faults and runtime hardware state without a reboot.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)

# Start-up is the cost of every node command (the fact script runs several per audit), so
# the wrappers start Python isolated and without `site` (`python3 -IS`), and modules only
# some commands need (glob, subprocess, shutil, base64, time, signal, the boot helpers,
# yaml) are imported where they are used.
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from sparkbase.lab import boot as B
else:

    class _LazyBoot:
        """The boot helpers (`sparkbase.lab.boot`), imported on first attribute access."""

        def __getattr__(self, name: str) -> object:
            try:
                from sparkbase.lab import boot as module
            except ImportError:  # inside a node: the copy next to this file
                import sparkbase_lab_boot as module
            globals()["B"] = module
            return getattr(module, name)

    B = _LazyBoot()


try:
    from sparkbase.lab.shims.node_query import (
        ARCH,
        Fail,
        _key_record,
        active_units,
        cmd_getconf,
        cmd_mokutil,
        cmd_nvidia_smi,
        cmd_uname,
        default_net,
        default_target,
        faults,
        firmware,
        install_section,
        node_info,
        read_json,
        read_text,
        show,
        state,
        unit_file_state,
        write_json,
    )
    from sparkbase.lab.shims.node_query import links as _links
except ImportError:  # inside a node: the copy next to this file
    from node_query import (  # type: ignore[import-not-found,no-redef,unused-ignore]
        ARCH,
        Fail,
        _key_record,
        active_units,
        cmd_getconf,
        cmd_mokutil,
        cmd_nvidia_smi,
        cmd_uname,
        default_net,
        default_target,
        faults,
        firmware,
        install_section,
        node_info,
        read_json,
        read_text,
        show,
        state,
        unit_file_state,
        write_json,
    )
    from node_query import links as _links  # type: ignore[import-not-found,no-redef,unused-ignore]


def _glob(pattern: str) -> list[str]:
    """`glob.glob`, imported on first use."""
    import glob

    return glob.glob(pattern)


#: where python3-yaml lives on Debian/Ubuntu (not on sys.path under `python3 -S`)
DIST_PACKAGES = "/usr/lib/python3/dist-packages"

RUN = Path("/run/sparkbase-lab")
VAR = Path("/var/lib/sparkbase-lab")
FIRMWARE = RUN / "firmware" / "firmware.json"
FAULTS = RUN / "firmware" / "faults.json"
STATE = RUN / "state.json"
NET = RUN / "net.json"
SWAPS = RUN / "swaps.json"
ACTIVE = RUN / "active"
NODE = Path("/etc/sparkbase-lab/node.json")
SYSTEMD_ETC = Path("/etc/systemd/system")
SYSTEMD_LIB = Path("/lib/systemd/system")
ALWAYS_ACTIVE = {"ssh.service", "sshd.service"}


# --- small helpers ---------------------------------------------------------------------


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def sorted_conf(pattern: str) -> list[str]:
    return [read_text(p) for p in sorted(_glob(pattern))]


def installed_kernels() -> set[str]:
    return {p[len("/boot/vmlinuz-") :] for p in _glob("/boot/vmlinuz-*")}


# --- module files (stand-in .ko are key=value text) ------------------------------------


def parse_ko(path: Path | str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in read_text(path).splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def find_module(name: str, release: str) -> Path | None:
    name = name.replace("-", "_")
    base = Path("/lib/modules") / release
    for candidate in [base / "updates/dkms" / f"{name}.ko", *sorted(base.glob(f"kernel/**/{name}.ko"))]:
        if candidate.is_file():
            return candidate
    return None


def load_refusal(info: dict[str, str], fw: dict[str, Any]) -> str | None:
    """Why Secure Boot refuses a module (None when it may load)."""
    if not fw.get("secure_boot"):
        return None
    if info.get("builtin_signed") == "yes":
        return None
    key = info.get("sig_key", "")
    if not key:
        return "module is unsigned"
    if key not in {k.get("fingerprint") for k in fw.get("enrolled", [])}:
        return f"module is signed by key {key}, which is not enrolled"
    return None


# --- the boot step ---------------------------------------------------------------------


def boot_log(message: str) -> None:
    import time
    VAR.mkdir(parents=True, exist_ok=True)
    with open(VAR / "boot.log", "a") as fh:
        fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}\n")


def choose_kernel() -> B.BootChoice:
    installed = installed_kernels()
    grubenv_path = Path("/boot/grub/grubenv")
    grubenv = B.parse_grubenv(read_text(grubenv_path))
    menu = B.parse_grub_cfg(read_text("/boot/grub/grub.cfg"))
    if not menu.entries:
        settings = grub_settings()
        menu = B.parse_grub_cfg(B.render_grub_cfg(sorted(installed), settings))
    previous = read_text(VAR / "last-release").strip() or None
    unbootable = set(faults().get("kernel-panic", []))
    choice = B.select_boot(menu, grubenv, installed, unbootable, previous)
    if choice.used_oneshot:
        grubenv.pop("next_entry", None)
        write_text(grubenv_path, B.render_grubenv(grubenv))
    return choice


def grub_settings() -> dict[str, str]:
    return B.grub_settings(
        read_text("/etc/default/grub"), sorted_conf("/etc/default/grub.d/*.cfg")
    )


def compute_modules(release: str, fw: dict[str, Any]) -> tuple[list[str], dict[str, dict[str, str]]]:
    loaded: list[str] = []
    nvidia = find_module("nvidia", release)
    if nvidia is not None:
        loaded += ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"]
    loaded += ["mlx5_core", "mlx5_ib"]
    for ko in sorted(Path("/lib/modules", release, "updates/dkms").glob("*.ko")):
        info = parse_ko(ko)
        why = load_refusal(info, fw)
        if why:
            boot_log(f"Secure Boot: refused to load {ko.stem} ({why})")
            continue
        loaded.append(ko.stem)
    options = B.parse_modprobe_options(sorted_conf("/etc/modprobe.d/*.conf"))
    params: dict[str, dict[str, str]] = {}
    defaults = {"nvidia_drm": {"modeset": "N", "fbdev": "N"}, "uvm_memory_saver": {"leaf_packing": "0"}}
    for module in loaded:
        merged = dict(defaults.get(module, {}))
        merged.update(options.get(module, {}))
        if merged:
            params[module] = {
                k: B.sysfs_param(v, (module, k) in B.BOOL_PARAMS) for k, v in merged.items()
            }
    return loaded, params


def module_version(module: str, release: str) -> tuple[str, str] | None:
    """(version, srcversion) of a loaded module whose file carries a `version=` line (a
    real module with MODULE_VERSION); the nvidia family shares nvidia.ko's stand-in.
    srcversion is 23 upper-case hex digits, as modpost writes it, derived from the file."""
    import hashlib
    family = "nvidia" if module.startswith("nvidia") else module
    path = find_module(family, release)
    version = parse_ko(path).get("version") if path is not None else None
    if path is None or not version:
        return None
    digest = hashlib.sha256(f"{module}\n{read_text(path)}".encode()).hexdigest().upper()
    return version, digest[:23]


def write_modules(loaded: list[str], params: dict[str, dict[str, str]], release: str | None = None) -> None:
    import shutil
    sizes = {"nvidia": 14274560, "nvidia_uvm": 2056192, "nvidia_modeset": 1511424,
             "nvidia_drm": 126976, "mlx5_core": 2588672, "mlx5_ib": 520192}
    users = {"nvidia": "nvidia_uvm,nvidia_modeset", "nvidia_modeset": "nvidia_drm",
             "mlx5_core": "mlx5_ib"}
    rows = [(m, sizes.get(m, 65536), users.get(m, "-") if users.get(m, "-").split(",")[0] in loaded
             else "-") for m in reversed(loaded)]
    write_text(RUN / "proc/modules", B.modules_text(rows))
    sys_module = Path("/sys/module")
    if sys_module.exists():
        shutil.rmtree(sys_module, ignore_errors=True)
    for module in loaded:
        (sys_module / module / "parameters").mkdir(parents=True, exist_ok=True)
        write_text(sys_module / module / "initstate", "live\n")
        versions = module_version(module, release) if release else None
        if versions is not None:
            write_text(sys_module / module / "version", versions[0] + "\n")
            write_text(sys_module / module / "srcversion", versions[1] + "\n")
        for key, value in params.get(module, {}).items():
            write_text(sys_module / module / "parameters" / key, value + "\n")


def compute_active(default_target: str) -> list[str]:
    active = set(ALWAYS_ACTIVE)
    for link in _glob(str(SYSTEMD_ETC / "multi-user.target.wants/*")):
        active.add(os.path.basename(link))
    if default_target == "graphical.target":
        for link in _glob(str(SYSTEMD_ETC / "graphical.target.wants/*")):
            active.add(os.path.basename(link))
        dm = SYSTEMD_ETC / "display-manager.service"
        if dm.is_symlink() or dm.exists():
            active.add("display-manager.service")
            active.add(os.path.basename(os.path.realpath(dm)))
    return sorted(active)


def write_sysfs_static(node: str) -> None:
    Path("/sys/firmware/efi/efivars").mkdir(parents=True, exist_ok=True)
    Path("/sys/kernel/mm/transparent_hugepage").mkdir(parents=True, exist_ok=True)
    for cpu in range(B.NCPUS):
        Path(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq").mkdir(parents=True, exist_ok=True)
    write_text(Path("/sys/devices/system/cpu/online"), f"0-{B.NCPUS - 1}\n")
    write_text(Path("/sys/devices/system/cpu/possible"), f"0-{B.NCPUS - 1}\n")


def write_governor() -> None:
    governor = "powersave" if faults().get("governor") else "performance"
    for cpu in range(B.NCPUS):
        base = Path(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq")
        write_text(base / "scaling_governor", governor + "\n")
        write_text(base / "scaling_available_governors",
                   "conservative ondemand userspace powersave performance schedutil\n")
        write_text(base / "scaling_max_freq", "3900000\n" if cpu in B.FAST_CPUS else "2808000\n")




def write_fabric_sysfs() -> None:
    import shutil
    net: dict[str, Any] = read_json(NET, {}) or default_net()
    flt = faults()
    down = set(flt.get("link-down", []))
    moved = bool(flt.get("gid-moved"))
    ib = Path("/sys/class/infiniband")
    shutil.rmtree(ib, ignore_errors=True)
    for hca, netdev in B.FABRIC.items():
        dev = net.get(netdev, {})
        link_up = dev.get("up", True) and hca not in down and netdev not in down
        port = ib / hca / "ports/1"
        (ib / hca / "device/net" / netdev).mkdir(parents=True, exist_ok=True)
        write_text(port / "state", "4: ACTIVE\n" if link_up else "1: DOWN\n")
        write_text(port / "phys_state", "5: LinkUp\n" if link_up else "3: Disabled\n")
        write_text(port / "link_layer", "Ethernet\n")
        write_text(port / "rate", "200 Gb/sec (4X HDR)\n")
        ipv4 = next((a for a in dev.get("addresses", []) if ":" not in a), None) if link_up else None
        table = B.gid_table(dev.get("mac", "00:00:00:00:00:00"), ipv4, moved)
        for index in range(8):
            gid, kind = table.get(index, ("0000:0000:0000:0000:0000:0000:0000:0000", ""))
            write_text(port / "gids" / str(index), gid + "\n")
            (port / "gid_attrs/types").mkdir(parents=True, exist_ok=True)
            (port / "gid_attrs/ndevs").mkdir(parents=True, exist_ok=True)
            if kind:
                write_text(port / "gid_attrs/types" / str(index), kind + "\n")
                write_text(port / "gid_attrs/ndevs" / str(index), netdev + "\n")
    netdir = Path("/sys/class/net")
    for netdev, dev in net.items():
        base = netdir / netdev
        base.mkdir(parents=True, exist_ok=True)
        link_up = dev.get("up", True) and netdev not in down and not any(
            h in down for h, n in B.FABRIC.items() if n == netdev
        )
        write_text(base / "mtu", f"{dev.get('mtu', 1500)}\n")
        write_text(base / "operstate", "up\n" if link_up else "down\n")
        write_text(base / "address", dev.get("mac", "") + "\n")


def do_boot() -> int:
    """Compute this boot and write every runtime file (run by node init as PID 1's child)."""
    import time
    RUN.mkdir(parents=True, exist_ok=True)
    node = node_info().get("name", os.uname().nodename)
    fw = firmware()
    if fw.get("pending"):
        fw["enrolled"] = fw["enrolled"] + fw["pending"]
        fw["pending"] = []
        write_json(FIRMWARE, fw)
        boot_log("MokManager: enrolled pending MOK keys")
    choice = choose_kernel()
    if choice.fallback_reason:
        boot_log(f"boot: {choice.fallback_reason}")
    write_text(VAR / "last-release", choice.release + "\n")
    boot_log(f"boot: {choice.release}{' (one-shot entry)' if choice.used_oneshot else ''}")
    cmdline = B.proc_cmdline(choice.release, choice.args)
    nvidia = find_module("nvidia", choice.release)
    driver = parse_ko(nvidia).get("version") if nvidia else None
    loaded, params = compute_modules(choice.release, fw)
    thp = B.cmdline_param(cmdline, "transparent_hugepage") or "madvise"
    if thp not in B.THP_MODES:
        thp = "madvise"
    target = default_target()
    write_json(STATE, {
        "release": choice.release, "page_size": B.page_size(choice.release),
        "cmdline": cmdline, "driver": driver, "modules": loaded, "params": params,
        "default_target": target, "booted_at": time.time(), "node": node,
        "fallback": choice.fallback_reason,
    })
    write_text(RUN / "proc/cmdline", cmdline + "\n")
    write_text(RUN / "proc/cpuinfo", B.cpuinfo_text())
    write_modules(loaded, params, choice.release)
    write_sysfs_static(node)
    write_text(Path("/sys/kernel/mm/transparent_hugepage/enabled"), B.thp_text(thp))
    write_text(Path("/sys/kernel/mm/transparent_hugepage/defrag"),
               "always defer defer+madvise [madvise] never\n")
    write_governor()
    sysctls = dict(B.SYSCTL_DEFAULTS)
    conf = B.parse_sysctl_conf([read_text("/etc/sysctl.conf"), *sorted_conf("/etc/sysctl.d/*.conf")])
    for key, value in conf.items():
        if key in sysctls:
            sysctls[key] = value
    for key, value in sysctls.items():
        write_text(RUN / "sysctl" / key, value + "\n")
    write_text(ACTIVE, "".join(f"{u}\n" for u in compute_active(target)))
    write_json(SWAPS, [])
    for line in read_text("/etc/fstab").splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 3 and words[2] == "swap" and "noauto" not in words[3:4]:
            try:
                swap_activate(words[0], -2)
            except Fail as exc:
                boot_log(f"swap: {exc}")
    write_json(NET, default_net())
    try:
        netplan_apply()
    except Fail as exc:
        boot_log(f"netplan: {exc}")
    write_fabric_sysfs()
    print(json.dumps({"sysctls": sorted(sysctls)}))
    return 0


def do_refresh() -> int:
    """Re-apply fault-driven hardware state (governor, links, GIDs) without a reboot."""
    write_governor()
    write_fabric_sysfs()
    return 0


# --- commands --------------------------------------------------------------------------


def cmd_nproc(argv: list[str]) -> int:
    print(B.NCPUS)
    return 0


# --- Secure Boot / MOK -----------------------------------------------------------------


# --- DKMS and modules ------------------------------------------------------------------


def _dkms_conf(name: str, version: str) -> dict[str, str]:
    src = Path("/usr/src") / f"{name}-{version}"
    conf = src / "dkms.conf"
    if not conf.is_file():
        raise Fail(f"Error! Could not find module source directory.\nDirectory: {src} does not exist.", 3)
    return B.parse_shell_assignments(read_text(conf).replace("[0]", "_0"))


def _dkms_target(argv: list[str]) -> tuple[str, str, list[str], bool]:
    name = version = ""
    kernels: list[str] = []
    all_kernels = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            name = argv[i + 1]
            i += 1
        elif arg == "-v":
            version = argv[i + 1]
            i += 1
        elif arg == "-k":
            kernels.append(argv[i + 1].split("/")[0])
            i += 1
        elif arg == "--all":
            all_kernels = True
        elif not arg.startswith("-") and "/" in arg:
            name, version = arg.split("/", 1)
        i += 1
    if "/" in name:
        name, version = name.split("/", 1)
    return name, version, kernels, all_kernels


def _sign_info() -> dict[str, str]:
    priv = Path("/var/lib/shim-signed/mok/MOK.priv")
    der = Path("/var/lib/shim-signed/mok/MOK.der")
    if priv.is_file() and der.is_file():
        rec = _key_record(str(der))
        return {"signer": rec["subject"].replace("CN=", "").strip() or "MOK",
                "sig_key": rec["fingerprint"], "sig_hashalgo": "sha512"}
    return {}


def _dkms_build(name: str, version: str, release: str, install: bool) -> None:
    import re
    import shutil
    conf = _dkms_conf(name, version)
    if not Path(f"/usr/src/linux-headers-{release}").is_dir():
        raise Fail(f"Error! Your kernel headers for kernel {release} cannot be found at "
                   f"/lib/modules/{release}/build or /lib/modules/{release}/source.", 1)
    module = conf.get("BUILT_MODULE_NAME_0", name.replace("-", "_"))
    tree = Path("/var/lib/dkms") / name / version
    built = tree / release / ARCH / "module" / f"{module}.ko"
    params = re.findall(r"module_param\((\w+),\s*(\w+)", read_text(
        Path("/usr/src") / f"{name}-{version}" / f"{module}.c"))
    lines = [
        "sparkbase-lab module", f"name={module}", f"version={conf.get('PACKAGE_VERSION', version)}",
        f"vermagic={release} SMP mod_unload aarch64", f"srcversion={name}-{version}",
        *(f"parm={p}:{t}" for p, t in params),
    ]
    sign = _sign_info()
    lines += [f"{k}={v}" for k, v in sign.items()]
    write_text(built, "\n".join(lines) + "\n")
    source = tree / "source"
    if not source.exists():
        source.symlink_to(f"/usr/src/{name}-{version}")
    print("Sign command: /usr/lib/linux-kbuild/scripts/sign-file" if sign else
          "Kernel module signing skipped: no MOK key pair in /var/lib/shim-signed/mok")
    print("Building module(s)... done.")
    if install:
        dest = Path("/lib/modules") / release / "updates/dkms" / f"{module}.ko"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, dest)
        write_text(tree / release / ARCH / "installed", "")
        print(f"Installing {dest}\nRunning depmod... done.")


def cmd_dkms(argv: list[str]) -> int:
    import shutil
    if not argv:
        raise Fail("Usage: dkms [action] [options]", 1)
    action, rest = argv[0], argv[1:]
    running = state()["release"]
    name, version, kernels, all_kernels = _dkms_target(rest)
    if action == "status":
        for tree in sorted(Path("/var/lib/dkms").glob("*/*")):
            if not tree.is_dir() or tree.name == "source":
                continue
            mod, ver = tree.parent.name, tree.name
            if name and mod != name:
                continue
            releases = [d.name for d in sorted(tree.iterdir()) if d.is_dir() and (d / ARCH).is_dir()]
            shown = False
            for rel in releases:
                if kernels and rel not in kernels:
                    continue
                status = "installed" if (tree / rel / ARCH / "installed").exists() else "built"
                print(f"{mod}/{ver}, {rel}, {ARCH}: {status}")
                shown = True
            if not shown and not kernels:
                print(f"{mod}/{ver}: added")
        return 0
    if not name or not version:
        raise Fail("Error! Arguments <module> and <module-version> are not specified.", 2)
    if action == "add":
        _dkms_conf(name, version)
        tree = Path("/var/lib/dkms") / name / version
        tree.mkdir(parents=True, exist_ok=True)
        if not (tree / "source").exists():
            (tree / "source").symlink_to(f"/usr/src/{name}-{version}")
        print(f"Creating symlink /var/lib/dkms/{name}/{version}/source -> /usr/src/{name}-{version}")
        return 0
    if action in ("build", "install", "autoinstall"):
        for release in kernels or [running]:
            _dkms_build(name, version, release, install=action != "build")
        return 0
    if action in ("remove", "uninstall", "unbuild"):
        tree = Path("/var/lib/dkms") / name / version
        conf = _dkms_conf(name, version) if Path(f"/usr/src/{name}-{version}").exists() else {}
        module = conf.get("BUILT_MODULE_NAME_0", name.replace("-", "_"))
        releases = (
            [d.name for d in tree.iterdir() if d.is_dir() and d.name != "source"]
            if tree.exists() else []
        )
        if not all_kernels and kernels:
            releases = [r for r in releases if r in kernels]
        for release in releases:
            (Path("/lib/modules") / release / "updates/dkms" / f"{module}.ko").unlink(missing_ok=True)
            if action != "uninstall":
                shutil.rmtree(tree / release, ignore_errors=True)
            else:
                (tree / release / ARCH / "installed").unlink(missing_ok=True)
        if action == "remove" and (all_kernels or not kernels):
            shutil.rmtree(tree, ignore_errors=True)
        print(f"Module {name}/{version} removed.")
        return 0
    raise Fail(f"dkms: action {action} is not emulated by the sparkbase lab", 2)


def cmd_modinfo(argv: list[str]) -> int:
    release = state()["release"]
    field = None
    name = None
    i = 0
    while i < len(argv):
        if argv[i] == "-k":
            release = argv[i + 1]
            i += 1
        elif argv[i] == "-F":
            field = argv[i + 1]
            i += 1
        elif argv[i].startswith("--field="):
            field = argv[i].split("=", 1)[1]
        else:
            name = argv[i]
        i += 1
    if not name:
        raise Fail("modinfo: ERROR: missing module or filename.")
    path = Path(name) if name.endswith(".ko") else find_module(name, release)
    if path is None or not path.is_file():
        raise Fail(f"modinfo: ERROR: Module {name} not found.")
    info = parse_ko(path)
    parms = [line.split("=", 1)[1] for line in read_text(path).splitlines() if line.startswith("parm=")]
    rows = [("filename", str(path)), ("version", info.get("version", "")),
            ("srcversion", info.get("srcversion", "")),
            ("vermagic", info.get("vermagic", "")), ("name", info.get("name", path.stem))]
    if info.get("sig_key"):
        rows += [("sig_id", "PKCS#7"), ("signer", info.get("signer", "")),
                 ("sig_key", info.get("sig_key", "")),
                 ("sig_hashalgo", info.get("sig_hashalgo", "sha512"))]
    if field is not None:
        if field == "parm":
            for p in parms:
                print(p)
            return 0
        value = dict(rows).get(field, "")
        if value:
            print(value)
        return 0
    for key, value in rows:
        if value:
            print(f"{key + ':':<16}{value}")
    for p in parms:
        print(f"{'parm:':<16}{p}")
    return 0


def _proc_modules() -> list[str]:
    return [line.split()[0] for line in read_text("/proc/modules").splitlines() if line.strip()]


def cmd_modprobe(argv: list[str]) -> int:
    remove = any(a in ("-r", "--remove") for a in argv)
    names = [a for a in argv if not a.startswith("-") and "=" not in a]
    if not names:
        raise Fail("modprobe: ERROR: missing parameters. See -h.")
    st = state()
    release = st["release"]
    loaded = list(st.get("modules", []))
    params = dict(st.get("params", {}))
    name = names[0].replace("-", "_")
    if remove:
        if name in loaded:
            loaded.remove(name)
    elif name not in loaded:
        path = find_module(name, release)
        if path is None:
            raise Fail(f"modprobe: FATAL: Module {name} not found in directory /lib/modules/{release}")
        why = load_refusal(parse_ko(path), firmware())
        if why:
            raise Fail(f"modprobe: ERROR: could not insert '{name}': Key was rejected by service")
        loaded.append(name)
        options = B.parse_modprobe_options(sorted_conf("/etc/modprobe.d/*.conf"))
        extra = {k: v for a in argv if "=" in a for k, v in [a.split("=", 1)]}
        merged = {"leaf_packing": "0"} if name == "uvm_memory_saver" else {}
        merged.update(options.get(name, {}))
        merged.update(extra)
        if merged:
            params[name] = {
                k: B.sysfs_param(v, (name, k) in B.BOOL_PARAMS) for k, v in merged.items()
            }
    st["modules"] = loaded
    st["params"] = params
    write_json(STATE, st)
    write_modules(loaded, params, release)
    return 0


def cmd_lsmod(argv: list[str]) -> int:
    print("Module                  Size  Used by")
    for line in read_text(RUN / "proc/modules").splitlines():
        words = line.split()
        if len(words) >= 4:
            by = words[3].rstrip(",") if words[3] != "-" else ""
            print(f"{words[0]:<19} {words[1]:>8}  {words[2]} {by}".rstrip())
    return 0


def cmd_noop(argv: list[str]) -> int:
    return 0


# --- swap -------------------------------------------------------------------------------


def _swaps() -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = read_json(SWAPS, [])
    return data


def swap_activate(path: str, prio: int) -> None:
    real = os.path.realpath(path)
    try:
        with open(real, "rb") as fh:
            header = fh.read(65536)
        size = os.path.getsize(real)
    except OSError as exc:
        raise Fail(f"swapon: cannot open {path}: {exc.strerror}", 255) from exc
    if real in {s["path"] for s in _swaps()}:
        raise Fail(f"swapon: {path}: swapon failed: Device or resource busy", 255)
    found = B.swap_header_page_size(header)
    if found is None:
        raise Fail(f"swapon: {path}: read swap header failed", 255)
    if found != state()["page_size"]:
        raise Fail(f"swapon: {path}: swapspace has wrong page size", 255)
    mode = os.stat(real).st_mode & 0o777
    if mode & 0o077:
        print(f"swapon: {path}: insecure permissions {mode:04o}, 0600 suggested.", file=sys.stderr)
    swaps = _swaps()
    swaps.append({"path": real, "size": size, "prio": prio})
    write_json(SWAPS, swaps)


def _human(size: int) -> str:
    units = ["B", "K", "M", "G", "T", "P"]
    value = float(size)
    unit = 0
    while value >= 1024 and unit < len(units) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{size}B"
    text = f"{value:.1f}".rstrip("0").rstrip(".")
    return f"{text}{units[unit]}"


def cmd_swapon(argv: list[str]) -> int:
    show: str | None = None
    as_bytes = noheadings = do_all = False
    prio = -2
    files: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--show"):
            show = arg.split("=", 1)[1] if "=" in arg else "NAME,TYPE,SIZE,USED,PRIO"
        elif arg in ("-s", "--summary"):
            show = "summary"
        elif arg in ("--bytes", "-b"):
            as_bytes = True
        elif arg in ("--noheadings", "-n"):
            noheadings = True
        elif arg in ("-a", "--all"):
            do_all = True
        elif arg in ("-p", "--priority"):
            prio = int(argv[i + 1])
            i += 1
        elif arg.startswith("-"):
            pass
        else:
            files.append(arg)
        i += 1
    if show is None and not files and not do_all:
        show = "NAME,TYPE,SIZE,USED,PRIO"
    if show == "summary":
        print("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority")
        for s in _swaps():
            print(f"{s['path']:<40}file\t\t{s['size'] // 1024}\t\t0\t\t{s['prio']}")
        return 0
    if show is not None:
        cols = [c.strip().upper() for c in show.split(",") if c.strip()]
        rows = []
        for s in _swaps():
            values = {"NAME": s["path"], "TYPE": "file",
                      "SIZE": str(s["size"]) if as_bytes else _human(s["size"]),
                      "USED": "0" if as_bytes else "0B", "PRIO": str(s["prio"]),
                      "UUID": "", "LABEL": ""}
            rows.append([values.get(c, "") for c in cols])
        if not rows:
            return 0
        if not noheadings:
            rows.insert(0, cols)
        widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
        for row in rows:
            parts = [row[i].ljust(widths[i]) if i == 0 else row[i].rjust(widths[i]) for i in range(len(cols))]
            print(" ".join(parts).rstrip())
        return 0
    if do_all:
        active = {s["path"] for s in _swaps()}
        for line in read_text("/etc/fstab").splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) >= 3 and words[2] == "swap" and os.path.realpath(words[0]) not in active:
                swap_activate(words[0], prio)
    for f in files:
        swap_activate(f, prio)
    return 0


def cmd_swapoff(argv: list[str]) -> int:
    swaps = _swaps()
    if "-a" in argv or "--all" in argv:
        write_json(SWAPS, [])
        return 0
    for f in [a for a in argv if not a.startswith("-")]:
        real = os.path.realpath(f)
        if real not in {s["path"] for s in swaps}:
            raise Fail(f"swapoff: {f}: swapoff failed: Invalid argument", 255)
        swaps = [s for s in swaps if s["path"] != real]
    write_json(SWAPS, swaps)
    return 0


def cmd_fallocate(argv: list[str]) -> int:
    size = None
    files = []
    i = 0
    while i < len(argv):
        if argv[i] in ("-l", "--length"):
            size = B.parse_size(argv[i + 1])
            i += 1
        elif argv[i].startswith("--length="):
            size = B.parse_size(argv[i].split("=", 1)[1])
        elif not argv[i].startswith("-"):
            files.append(argv[i])
        i += 1
    if size is None or len(files) != 1:
        raise Fail("fallocate: no length argument specified", 1)
    with open(files[0], "ab") as fh:
        if os.path.getsize(files[0]) < size:
            fh.truncate(size)
    return 0


def cmd_mkswap(argv: list[str]) -> int:
    import subprocess
    args = list(argv)
    if not any(a in ("-p", "--pagesize") or a.startswith("--pagesize=") for a in args):
        args = ["--pagesize", str(state()["page_size"]), *args]
    return subprocess.call(["/usr/sbin/mkswap", *args])


# --- systemd ----------------------------------------------------------------------------


def _unit_path(unit: str) -> Path | None:
    for base in (SYSTEMD_ETC, SYSTEMD_LIB):
        p = base / unit
        if p.exists() or p.is_symlink():
            return p
    return None


def _unit_name(unit: str) -> str:
    return unit if "." in unit else unit + ".service"


def _install_section(path: Path) -> dict[str, list[str]]:
    return install_section(str(path))


def _is_enabled(unit: str) -> str:
    value = unit_file_state(unit)
    if value is None:
        raise Fail(f"Failed to get unit file state for {unit}: No such file or directory", 1)
    return value


def _active() -> set[str]:
    return active_units()


def _set_active(units: set[str]) -> None:
    write_text(ACTIVE, "".join(f"{u}\n" for u in sorted(units)))


def _resolve_alias(unit: str) -> str:
    p = _unit_path(unit)
    return os.path.basename(os.path.realpath(p)) if p is not None else unit


def _enable(unit: str, enable: bool) -> None:
    path = _unit_path(unit)
    if path is None:
        raise Fail(f"Failed to enable unit: Unit file {unit} does not exist.", 1)
    real = Path(os.path.realpath(path))
    install = _install_section(real)
    if not install:
        print("The unit files have no installation config (WantedBy=, RequiredBy=, Also=,\n"
              "Alias= settings in the [Install] section, and DefaultInstance= for template\n"
              "units). This means they are not meant to be enabled or disabled using systemctl.",
              file=sys.stderr)
        return
    links = [SYSTEMD_ETC / f"{t}.wants" / real.name for t in install.get("WantedBy", [])]
    links += [SYSTEMD_ETC / f"{t}.requires" / real.name for t in install.get("RequiredBy", [])]
    links += [SYSTEMD_ETC / alias for alias in install.get("Alias", [])]
    for link in links:
        if enable:
            if not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(real)
                print(f"Created symlink {link} \u2192 {real}.", file=sys.stderr)
        elif link.is_symlink():
            link.unlink()
            print(f"Removed \"{link}\".", file=sys.stderr)


def cmd_systemctl(argv: list[str]) -> int:
    flags = [a for a in argv if a.startswith("-")]
    args = [a for a in argv if not a.startswith("-")]
    props: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in ("-p", "--property"):
            props += argv[i + 1].split(",")
            if argv[i + 1] in args:
                args.remove(argv[i + 1])
            i += 1
        elif argv[i].startswith("--property="):
            props += argv[i].split("=", 1)[1].split(",")
        i += 1
    quiet = "-q" in flags or "--quiet" in flags
    now = "--now" in flags
    if not args:
        raise Fail("systemctl: listing units is not emulated by the sparkbase lab", 1)
    verb, units = args[0], [_unit_name(u) for u in args[1:]]
    if verb == "get-default":
        print(default_target())
        return 0
    if verb == "set-default":
        target = units[0] if units else ""
        if not (SYSTEMD_LIB / target).exists():
            raise Fail(f"Failed to set default target: Unit file {target} does not exist.")
        link = SYSTEMD_ETC / "default.target"
        if link.is_symlink():
            link.unlink()
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(SYSTEMD_LIB / target)
        print(f"Created symlink {link} \u2192 {SYSTEMD_LIB / target}.", file=sys.stderr)
        return 0
    if verb in ("daemon-reload", "daemon-reexec", "reset-failed"):
        return 0
    if verb in ("reboot", "kexec"):
        return cmd_reboot([])
    if verb in ("poweroff", "halt"):
        return cmd_poweroff([])
    if verb == "is-enabled":
        status = 0
        for unit in units:
            try:
                value = _is_enabled(unit)
            except Fail as exc:
                if not quiet:
                    print(str(exc), file=sys.stderr)
                status = 1
                continue
            if not quiet:
                print(value)
            if value not in ("enabled", "alias", "static"):
                status = 1
        return status
    if verb == "is-active":
        active = _active()
        status = 0
        for unit in units:
            on = unit in active or _resolve_alias(unit) in active
            if not quiet:
                print("active" if on else "inactive")
            if not on:
                status = 3
        return status
    if verb in ("enable", "disable"):
        active = _active()
        for unit in units:
            _enable(unit, verb == "enable")
            if now:
                (active.add if verb == "enable" else active.discard)(_resolve_alias(unit))
        _set_active(active)
        return 0
    if verb in ("start", "stop", "restart", "reload", "try-restart", "reload-or-restart"):
        active = _active()
        for unit in units:
            if _unit_path(unit) is None:
                raise Fail(f"Failed to {verb} {unit}: Unit {unit} not found.", 5)
            if verb == "stop":
                active.discard(_resolve_alias(unit))
            elif verb != "try-restart" or _resolve_alias(unit) in active:
                active.add(_resolve_alias(unit))
        _set_active(active)
        return 0
    if verb in ("mask", "unmask"):
        for unit in units:
            link = SYSTEMD_ETC / unit
            if verb == "mask":
                if link.is_symlink():
                    link.unlink()
                link.symlink_to("/dev/null")
            elif link.is_symlink() and os.readlink(link) == "/dev/null":
                link.unlink()
        return 0
    if verb == "show":
        value_only = "--value" in flags
        for unit in units:
            for prop in props or ["ActiveState", "UnitFileState"]:
                value = _show(unit, prop)
                print(value if value_only else f"{prop}={value}")
        return 0
    raise Fail(f"systemctl: {verb} is not emulated by the sparkbase lab", 1)


def _show(unit: str, prop: str) -> str:
    return show(unit, prop)


# --- GRUB and reboot --------------------------------------------------------------------


def cmd_update_grub(argv: list[str]) -> int:
    out = Path(argv[1]) if argv and argv[0] == "-o" else Path("/boot/grub/grub.cfg")
    print("Sourcing file `/etc/default/grub'", file=sys.stderr)
    for f in sorted(_glob("/etc/default/grub.d/*.cfg")):
        print(f"Sourcing file `{f}'", file=sys.stderr)
    print("Generating grub configuration file ...", file=sys.stderr)
    releases = sorted(installed_kernels(), key=B.version_key, reverse=True)
    for release in releases:
        print(f"Found linux image: /boot/vmlinuz-{release}", file=sys.stderr)
    write_text(out, B.render_grub_cfg(releases, grub_settings()))
    print("done", file=sys.stderr)
    return 0


def cmd_grub_mkconfig(argv: list[str]) -> int:
    out = next((argv[i + 1] for i, a in enumerate(argv) if a == "-o"), None)
    if out is None:
        print(B.render_grub_cfg(sorted(installed_kernels()), grub_settings()))
        return 0
    return cmd_update_grub(["-o", out])


def _grubenv_set(key: str, value: str | None) -> None:
    path = Path("/boot/grub/grubenv")
    env = B.parse_grubenv(read_text(path))
    if value is None:
        env.pop(key, None)
    else:
        env[key] = value
    write_text(path, B.render_grubenv(env))


def cmd_grub_reboot(argv: list[str]) -> int:
    entries = [a for a in argv if not a.startswith("--")]
    if not entries:
        raise Fail("grub-reboot: error: menu entry not specified.", 1)
    _grubenv_set("next_entry", entries[0])
    return 0


def cmd_grub_set_default(argv: list[str]) -> int:
    entries = [a for a in argv if not a.startswith("--")]
    if not entries:
        raise Fail("grub-set-default: error: menu entry not specified.", 1)
    _grubenv_set("saved_entry", entries[0])
    return 0


def cmd_grub_editenv(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[1] == "list":
        for k, v in B.parse_grubenv(read_text("/boot/grub/grubenv")).items():
            print(f"{k}={v}")
        return 0
    if len(argv) >= 3 and argv[1] in ("set", "unset"):
        for item in argv[2:]:
            key, _, value = item.partition("=")
            _grubenv_set(key, value if argv[1] == "set" else None)
        return 0
    raise Fail("grub-editenv: only list/set/unset are emulated", 1)


def cmd_reboot(argv: list[str]) -> int:
    import signal
    sys.stdout.flush()
    os.kill(1, signal.SIGHUP)
    return 0


def cmd_shutdown(argv: list[str]) -> int:
    if "-r" in argv or "--reboot" in argv:
        return cmd_reboot([])
    if "-c" in argv:
        return 0
    return cmd_poweroff([])


def cmd_poweroff(argv: list[str]) -> int:
    raise Fail("the sparkbase lab cannot power a node off; use `sparkbase lab down`", 1)


# --- network ----------------------------------------------------------------------------


def _yaml() -> Any:
    """python3-yaml (node-side; the wrappers run without `site`, so add dist-packages)."""
    if DIST_PACKAGES not in sys.path:
        sys.path.append(DIST_PACKAGES)
    import yaml  # type: ignore[import-untyped,unused-ignore]

    return yaml


def _load_yaml(text: str) -> Any:
    return _yaml().safe_load(text)


def netplan_config() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for path in sorted(_glob("/etc/netplan/*.yaml")):
        try:
            data = _load_yaml(read_text(path)) or {}
        except Exception as exc:
            raise Fail(f"{path}: Invalid YAML: {exc}", 1) from exc
        network = data.get("network", {}) if isinstance(data, dict) else {}
        for kind in ("ethernets",):
            for name, conf in (network.get(kind) or {}).items():
                merged.setdefault(name, {}).update(conf or {})
    return merged


def netplan_apply() -> None:
    conf = netplan_config()
    net: dict[str, Any] = read_json(NET, {}) or default_net()
    for netdev, dev in net.items():
        if netdev == B.MGMT_NETDEV:
            continue
        c = conf.get(netdev, {})
        dev["addresses"] = [str(a) for a in c.get("addresses", [])]
        dev["mtu"] = int(c.get("mtu", 1500))
    write_json(NET, net)


def cmd_netplan(argv: list[str]) -> int:
    verb = argv[0] if argv else "generate"
    if verb == "apply":
        netplan_apply()
        write_fabric_sysfs()
        return 0
    if verb == "generate":
        netplan_config()
        return 0
    if verb == "get":
        print(_yaml().safe_dump({"network": {"version": 2, "ethernets": netplan_config()}},
                             default_flow_style=False).rstrip())
        return 0
    raise Fail(f"netplan: {verb} is not emulated by the sparkbase lab", 1)


def cmd_ip(argv: list[str]) -> int:
    as_json = brief = False
    family: str | None = None
    args: list[str] = []
    for arg in argv:
        if arg in ("-j", "-json", "--json"):
            as_json = True
        elif arg in ("-br", "-brief", "--brief"):
            brief = True
        elif arg == "-4":
            family = "inet"
        elif arg == "-6":
            family = "inet6"
        elif arg in ("-p", "-pretty", "-d", "-details", "-s", "-c", "-color"):
            pass
        else:
            args.append(arg)
    if not args:
        args = ["help"]
    obj = args[0]
    rest = args[1:]
    if rest and rest[0] in ("show", "list", "ls"):
        rest = rest[1:]
    dev = None
    if rest and rest[0] == "dev" and len(rest) > 1:
        dev = rest[1]
    elif rest and rest[0] not in ("set",):
        dev = rest[0]
    if obj in ("l", "li", "lin", "link") and args[1:2] == ["set"]:
        return _ip_link_set(args[2:])
    if obj not in ("a", "ad", "addr", "address", "l", "li", "lin", "link"):
        raise Fail(f"ip: '{obj}' is not emulated by the sparkbase lab", 1)
    links = _links()
    if dev is not None:
        links = [link for link in links if link["ifname"] == dev]
        if not links:
            raise Fail(f'Device "{dev}" does not exist.', 1)
    with_addr = obj.startswith("a")
    for link in links:
        if family:
            link["addr_info"] = [a for a in link["addr_info"] if a["family"] == family]
        if not with_addr:
            link.pop("addr_info")
    if with_addr and family:
        links = [link for link in links if link["addr_info"]] if family else links
    if as_json:
        print(json.dumps(links))
        return 0
    for link in links:
        if brief:
            addrs = " ".join(f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []))
            tail = addrs if with_addr else f"{link['address']} <{','.join(link['flags'])}>"
            print(f"{link['ifname']:<16} {link['operstate']:<14} {tail}".rstrip())
            continue
        print(f"{link['ifindex']}: {link['ifname']}: <{','.join(link['flags'])}> mtu {link['mtu']} "
              f"qdisc {link['qdisc']} state {link['operstate']} group default qlen {link['txqlen']}")
        print(f"    link/{link['link_type']} {link['address']} brd {link['broadcast']}")
        for a in link.get("addr_info", []):
            print(f"    {a['family']} {a['local']}/{a['prefixlen']} scope {a['scope']} {a['label']}")
            print("       valid_lft forever preferred_lft forever")
    return 0


def _ip_link_set(args: list[str]) -> int:
    if args and args[0] == "dev":
        args = args[1:]
    if not args:
        raise Fail("ip: link set needs a device", 1)
    net: dict[str, Any] = read_json(NET, {}) or default_net()
    name = args[0]
    if name not in net:
        raise Fail(f'Cannot find device "{name}"', 1)
    i = 1
    while i < len(args):
        if args[i] == "up":
            net[name]["up"] = True
        elif args[i] == "down":
            net[name]["up"] = False
        elif args[i] == "mtu":
            net[name]["mtu"] = int(args[i + 1])
            i += 1
        i += 1
    write_json(NET, net)
    write_fabric_sysfs()
    return 0


def cmd_rdma(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("-")]
    as_json = any(a in ("-j", "--json") for a in argv)
    if not args or args[0] != "link" or (len(args) > 1 and args[1] not in ("show", "list")):
        raise Fail("rdma: only `rdma link [show]` is emulated by the sparkbase lab", 1)
    only = args[2] if len(args) > 2 else None
    down = set(faults().get("link-down", []))
    net: dict[str, Any] = read_json(NET, {}) or default_net()
    rows = []
    for index, (hca, netdev) in enumerate(B.FABRIC.items()):
        if only and only not in (hca, f"{hca}/1"):
            continue
        up = hca not in down and netdev not in down and net.get(netdev, {}).get("up", True)
        rows.append({"ifindex": index, "ifname": hca, "port": 1,
                     "state": "ACTIVE" if up else "DOWN",
                     "physical_state": "LINK_UP" if up else "DISABLED", "netdev": netdev,
                     "netdev_index": index + 3})
    if as_json:
        print(json.dumps(rows))
        return 0
    for r in rows:
        print(f"link {r['ifname']}/1 state {r['state']} physical_state {r['physical_state']} "
              f"netdev {r['netdev']}")
    return 0


def cmd_lspci(argv: list[str]) -> int:
    print("0000:01:00.0 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n"
          "0000:01:00.1 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n"
          "0002:01:00.0 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n"
          "0002:01:00.1 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n"
          "0007:01:00.0 Ethernet controller: Realtek Semiconductor Co., Ltd. RTL8127 10GbE\n"
          "000f:01:00.0 VGA compatible controller: NVIDIA Corporation GB10 [Blackwell] (rev a1)")
    return 0


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "uname": cmd_uname, "getconf": cmd_getconf, "nproc": cmd_nproc,
    "nvidia-smi": cmd_nvidia_smi, "mokutil": cmd_mokutil, "dkms": cmd_dkms,
    "modinfo": cmd_modinfo, "modprobe": cmd_modprobe, "insmod": cmd_modprobe,
    "rmmod": lambda argv: cmd_modprobe(["-r", *argv]), "depmod": cmd_noop, "lsmod": cmd_lsmod,
    "update-initramfs": cmd_noop, "fallocate": cmd_fallocate, "mkswap": cmd_mkswap,
    "swapon": cmd_swapon, "swapoff": cmd_swapoff, "systemctl": cmd_systemctl,
    "update-grub": cmd_update_grub, "update-grub2": cmd_update_grub,
    "grub-mkconfig": cmd_grub_mkconfig, "grub-reboot": cmd_grub_reboot,
    "grub-set-default": cmd_grub_set_default, "grub-editenv": cmd_grub_editenv,
    "reboot": cmd_reboot, "shutdown": cmd_shutdown, "poweroff": cmd_poweroff,
    "halt": cmd_poweroff, "netplan": cmd_netplan, "ip": cmd_ip, "rdma": cmd_rdma,
    "lspci": cmd_lspci,
}

#: commands also shadowed in /usr/sbin (absolute paths must not reach the machine)
SBIN_SHADOWS = ("reboot", "shutdown", "poweroff", "halt", "swapon", "swapoff", "modprobe",
                "insmod", "rmmod", "depmod", "lsmod", "ip")


def main(command: str, argv: list[str]) -> int:
    """Run one node command; return its exit status."""
    try:
        if command == "__boot__":
            return do_boot()
        if command == "__refresh__":
            return do_refresh()
        return COMMANDS[command](argv)
    except Fail as exc:
        if str(exc):
            print(str(exc), file=sys.stderr)
        return exc.status
    except BrokenPipeError:
        return 141


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "", sys.argv[2:]))
