"""`modinfo`, `modprobe`/`insmod`/`rmmod`, `lsmod`, `depmod`, `dkms`: modules of the running kernel.

Stand-in module files are `key=value` text (see `parse_ko`); loading follows the Secure
Boot rule (a module must be signed by an enrolled key when Secure Boot is on).
"""

from __future__ import annotations

from pathlib import Path

from sparkbase.lab.shims.cmd_secureboot import key_record
from sparkbase.lab.shims.common import (
    ARCH,
    RUN,
    STATE,
    Fail,
    LazyModule,
    boot_log,
    firmware,
    read_text,
    sorted_conf,
    state,
    write_json,
    write_text,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from sparkbase.lab import boot as B
else:
    B = LazyModule("sparkbase.lab.boot")


def parse_ko(path: Path | str) -> dict[str, str]:
    """The key=value lines of a stand-in module file."""
    out: dict[str, str] = {}
    for line in read_text(path).splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def find_module(name: str, release: str) -> Path | None:
    """A module's file for a release: DKMS builds (`updates/dkms`) first, then `kernel/`."""
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


def compute_modules(release: str, fw: dict[str, Any]) -> tuple[list[str], dict[str, dict[str, str]]]:
    """The modules a boot loads (with the Secure Boot rule) and their parameters."""
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
    """`/proc/modules` and `/sys/module/<m>/...` for the loaded modules."""
    import shutil
    sizes = {"nvidia": 14274560, "nvidia_uvm": 2056192, "nvidia_modeset": 1511424,
             "nvidia_drm": 126976, "mlx5_core": 2588672, "mlx5_ib": 520192}
    users = {"nvidia": "nvidia_uvm,nvidia_modeset", "nvidia_modeset": "nvidia_drm",
             "mlx5_core": "mlx5_ib"}
    rows = [(m, sizes.get(m, 65536), users.get(m, "-") if users.get(m, "-").split(",")[0] in loaded
             else "-") for m in reversed(loaded)]
    write_text(f"{RUN}/proc/modules", B.modules_text(rows))
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
        rec = key_record(str(der))
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
    """`dkms status|add|build|install|autoinstall|remove|uninstall|unbuild`."""
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
    """`modinfo [-k REL] [-F FIELD] NAME|FILE`."""
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
    """`modprobe [-r] M [k=v...]` (also insmod/rmmod) with the Secure Boot rule."""
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
    """`lsmod`, from the node's /proc/modules."""
    print("Module                  Size  Used by")
    for line in read_text(f"{RUN}/proc/modules").splitlines():
        words = line.split()
        if len(words) >= 4:
            by = words[3].rstrip(",") if words[3] != "-" else ""
            print(f"{words[0]:<19} {words[1]:>8}  {words[2]} {by}".rstrip())
    return 0


def cmd_noop(argv: list[str]) -> int:
    """`depmod`, `update-initramfs`: nothing to do in the lab."""
    return 0


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "dkms": cmd_dkms, "modinfo": cmd_modinfo, "modprobe": cmd_modprobe, "insmod": cmd_modprobe,
    "rmmod": lambda argv: cmd_modprobe(["-r", *argv]), "depmod": cmd_noop, "lsmod": cmd_lsmod,
    "update-initramfs": cmd_noop,
}
