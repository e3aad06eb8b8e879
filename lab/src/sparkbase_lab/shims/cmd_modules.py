"""`modinfo`, `modprobe`/`insmod`/`rmmod`, `lsmod`, `depmod`, `dkms`: modules of the running kernel.

Stand-in module files are `key=value` text (see `parse_ko`); loading follows the Secure
Boot rule (a module must be signed by an enrolled key when Secure Boot is on).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sparkbase_lab.shims import modfile
from sparkbase_lab.shims.cmd_kernel import initramfs_options
from sparkbase_lab.shims.cmd_secureboot import key_record
from sparkbase_lab.shims.common import (
    ARCH,
    RUN,
    STATE,
    Fail,
    LazyModule,
    boot_log,
    faults,
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

    from sparkbase_lab import boot as B
    from sparkbase_lab.shims import sysfs
else:
    B = LazyModule("sparkbase_lab.boot")
    sysfs = LazyModule("sparkbase_lab.shims.sysfs")


def find_module(name: str, release: str) -> Path | None:
    """A module's file for a release as modprobe finds it: DKMS builds (`updates/dkms`)
    first, then `kernel/` (file names may use `-` where the module name has `_`)."""
    wanted = name.replace("-", "_")
    base = Path("/lib/modules") / release
    candidates = [*sorted(base.glob("updates/dkms/*.ko")), *sorted(base.glob("kernel/**/*.ko"))]
    return next((c for c in candidates if c.is_file() and modfile.module_name(str(c)) == wanted), None)


def refusal(path: Path, fw: dict[str, Any]) -> str | None:
    """Why the running kernel refuses `path` (None: it loads)."""
    from sparkbase_lab.shims.cmd_secureboot import enforcing

    return modfile.load_refusal(str(path), fw, enforcing(fw, faults()))


#: modules a Spark loads at boot when their files exist (the NVIDIA family needs nvidia.ko)
NVIDIA_FAMILY = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm")
FABRIC_MODULES = ("mlx5_core", "mlx5_ib")
#: modules built into the kernel: always in /sys/module, never in /proc/modules
BUILTIN_MODULES = ("nvme_core",)
#: parameters a module has before any modprobe.d option
PARAM_DEFAULTS = {"nvidia_drm": {"modeset": "N", "fbdev": "N"}}


def modules_load_d() -> list[str]:
    """Modules /etc/modules-load.d/*.conf names (one per line, `#`/`;` comments), as
    systemd-modules-load loads them at boot."""
    names: list[str] = []
    for text in sorted_conf("/etc/modules-load.d/*.conf"):
        for raw in text.splitlines():
            line = raw.strip()
            if line and not line.startswith(("#", ";")):
                names.append(line.replace("-", "_"))
    return names


def param_defaults(module: str, path: Path | None) -> dict[str, str]:
    """A module's parameters before any modprobe.d option: the table's, then those its
    file declares (a DKMS build's `module_param` with an initial value)."""
    merged = dict(PARAM_DEFAULTS.get(module, {}))
    if path is not None:
        merged.update(modfile.param_defaults(str(path)))
    return merged


def compute_modules(release: str, fw: dict[str, Any]) -> tuple[list[str], dict[str, dict[str, str]]]:
    """The modules a boot loads (with the Secure Boot rule) and their parameters."""
    wanted: list[str] = []
    if find_module("nvidia", release) is not None:
        wanted += NVIDIA_FAMILY
    wanted += FABRIC_MODULES
    dkms = Path("/lib/modules", release, "updates/dkms")
    wanted += [modfile.module_name(str(ko)) for ko in sorted(dkms.glob("*.ko"))]
    wanted += modules_load_d()
    loaded: list[str] = []
    for module in dict.fromkeys(wanted):
        path = find_module(module, release)
        if path is None and module not in NVIDIA_FAMILY + FABRIC_MODULES:
            continue
        why = refusal(path, fw) if path is not None else None
        if why:
            boot_log(f"Secure Boot: refused to load {module} ({why})")
            continue
        loaded.append(module)
    options = B.parse_modprobe_options(sorted_conf("/etc/modprobe.d/*.conf"))
    options.update(initramfs_options(release))
    params: dict[str, dict[str, str]] = {}
    for module in loaded:
        merged = param_defaults(module, find_module(module, release))
        merged.update(options.get(module, {}))
        if merged:
            params[module] = {
                k: B.sysfs_param(v, (module, k) in B.BOOL_PARAMS) for k, v in merged.items()
            }
    return loaded, params


def module_version(module: str, release: str) -> tuple[str, str] | None:
    """(version, srcversion) of a loaded module whose file carries a `version=` line (a
    real module with MODULE_VERSION), as /sys/module/<m>/ shows them (the same values
    `modinfo` prints). The NVIDIA family without files of their own take nvidia.ko's."""
    path = find_module(module, release)
    if path is None and module in NVIDIA_FAMILY:
        path = find_module("nvidia", release)
    version = modfile.parse_ko(str(path)).get("version") if path is not None else None
    if path is None or not version:
        return None
    own = modfile.srcversion(str(path))
    if modfile.module_name(str(path)) != module:  # a family member sharing nvidia.ko
        import hashlib

        own = hashlib.sha256(f"{module}\n{read_text(path)}".encode()).hexdigest().upper()[:23]
    return version, own


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
        for entry in sys_module.iterdir():
            if entry.name not in BUILTIN_MODULES:
                shutil.rmtree(entry, ignore_errors=True)
    for module in loaded:
        (sys_module / module / "parameters").mkdir(parents=True, exist_ok=True)
        write_text(sys_module / module / "initstate", "live\n")
        versions = module_version(module, release) if release else None
        if versions is not None:
            write_text(sys_module / module / "version", versions[0] + "\n")
            write_text(sys_module / module / "srcversion", versions[1] + "\n")
        for key, value in params.get(module, {}).items():
            write_text(sys_module / module / "parameters" / key, value + "\n")
    # the devices those modules drive: the DRM card bound to nvidia, the fan's cooling device
    sysfs.write_drm()
    sysfs.write_thermal(loaded)


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


#: where Ubuntu's DKMS finds the MOK key pair it signs with
MOK_PRIV = "/var/lib/shim-signed/mok/MOK.priv"
MOK_DER = "/var/lib/shim-signed/mok/MOK.der"


def _module_lines(
    name: str, version: str, release: str, module: str, conf: dict[str, str]
) -> list[tuple[str, str]]:
    """The `.modinfo` of a DKMS build, from its source (parameters from `module_param`)."""
    import re

    location = conf.get("BUILT_MODULE_LOCATION_0", "")  # the source's subdirectory, if any
    source = read_text(Path("/usr/src") / f"{name}-{version}" / location / f"{module}.c")
    params = re.findall(r"module_param\((\w+),\s*(\w+)", source)
    initial = dict(re.findall(r"static \w+ (\w+) = (\w+);", source))
    declared = re.search(r"sparkbase-lab srcversion: ([0-9A-F]+)", source)
    digest = declared[1] if declared else modfile._hex_digest(f"{name}/{version}\n{source}")[:23]
    defaults = [(p, modfile.sysfs_value(initial[p], t)) for p, t in params if p in initial]
    # the kernel's `version` field is the source's MODULE_VERSION, never DKMS's package
    # version (a module without one has no version line)
    module_version = re.search(r'MODULE_VERSION\("([^"]*)"\)', source)
    return [
        *((("version", module_version[1]),) if module_version else ()), ("license", "GPL"),
        ("description", f"{name} (DKMS build)"), ("srcversion", digest),
        ("depends", "nvidia" if module.startswith(("nvidia", "uvm")) else ""), ("name", module),
        ("vermagic", f"{release} SMP preempt mod_unload modversions aarch64"),
        *(("parm", f"{p}:{t}") for p, t in params),
        *((modfile.LAB_DEFAULT, f"{p}={v}") for p, v in defaults),
    ]


def _require_nvidia_source(release: str) -> None:
    """A build through the memory saver's `scripts/driver-build` reads NVIDIA's packaged
    kernel source for the driver the kernel's NVIDIA module carries (/usr/src/nvidia-<driver>,
    nvidia-kernel-source-580-open): without it, the build fails as make does."""
    nvidia = find_module("nvidia", release)
    driver = modfile.parse_ko(str(nvidia)).get("version") if nvidia is not None else None
    source = Path(f"/usr/src/nvidia-{driver}")
    if driver is None or not source.is_dir():
        raise Fail(f"driver-build: NVIDIA kernel source {source} not found (install "
                   "nvidia-kernel-source-580-open at the driver's version)\nError! Bad return status for "
                   f"module build on kernel: {release} ({ARCH})", 10)


def _dkms_build(name: str, version: str, release: str, install: bool) -> None:
    import re
    import shutil
    conf = _dkms_conf(name, version)
    if not Path(f"/lib/modules/{release}/build").is_dir():
        raise Fail(f"Error! Your kernel headers for kernel {release} cannot be found at "
                   f"/lib/modules/{release}/build or /lib/modules/{release}/source.", 1)
    module = conf.get("BUILT_MODULE_NAME_0", name.replace("-", "_"))
    tree = Path("/var/lib/dkms") / name / version
    exclusive = conf.get("BUILD_EXCLUSIVE_KERNEL")
    exclusive_arch = conf.get("BUILD_EXCLUSIVE_ARCH")
    if (exclusive and not re.search(exclusive, release)) or (
            exclusive_arch and not re.search(exclusive_arch, ARCH)):
        # DKMS 3's words and exit status for a BUILD_EXCLUSIVE mismatch
        raise Fail(f"Error! The {tree}/source/dkms.conf for module {name} includes a BUILD_EXCLUSIVE "
                   "directive which does not match this kernel/arch/config.\n"
                   "This indicates that it should not be built.", 77)
    if "driver-build" in conf.get("MAKE_0", ""):
        _require_nvidia_source(release)
    built = tree / release / ARCH / "module" / f"{module}.ko"
    lines = _module_lines(name, version, release, module, conf)
    signature: list[tuple[str, str]] = []
    if os.path.isfile(MOK_PRIV) and os.path.isfile(MOK_DER):
        signature = modfile.sign(lines, MOK_PRIV, key_record(MOK_DER))
    body = "".join(f"{k}={v}\n" for k, v in [*lines, *signature])
    write_text(built, f"{modfile.MAGIC}\n{body}")
    source = tree / "source"
    if not source.exists():
        source.symlink_to(f"/usr/src/{name}-{version}")
    print(f"Sign command: /usr/bin/kmodsign\nSigning key: {MOK_PRIV}\nPublic certificate (MOK): {MOK_DER}"
          if signature else f"Kernel module signing skipped: no MOK key pair in {os.path.dirname(MOK_PRIV)}")
    print("Building module(s)... done.")
    if install:
        dest = Path("/lib/modules") / release / "updates/dkms" / f"{module}.ko"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, dest)
        write_text(tree / release / ARCH / "installed", "")
        print(f"Installing {dest}\nRunning depmod... done.")


#: the package whose broken tree the `dkms-noise` fault adds (real sample:
#: tests/fixtures/real/dkms_status__ubuntu24.04_missing_dkms_conf__system76-driver-336.txt)
BROKEN_TREE = "/var/lib/dkms/system76/1.0.18~1743109511~24.04~8b1da53/source/dkms.conf"


def _status_line(mod: str, ver: str, release: str, tree: Path) -> str:
    """One DKMS 3.x status line: `name/version, kernel, arch: state[ (original_module exists)]`."""
    status = "installed" if (tree / release / ARCH / "installed").exists() else "built"
    module = _dkms_conf(mod, ver).get("BUILT_MODULE_NAME_0", mod.replace("-", "_")) \
        if Path(f"/usr/src/{mod}-{ver}/dkms.conf").is_file() else mod.replace("-", "_")
    stock = sorted((Path("/lib/modules") / release).glob(f"kernel/**/{module}.ko"))
    original = " (original_module exists)" if status == "installed" and stock else ""
    return f"{mod}/{ver}, {release}, {ARCH}: {status}{original}"


def _dkms_status(name: str, kernels: list[str]) -> int:
    """`dkms status [NAME[/VER]] [-k REL]`. Under the `dkms-noise` fault, real DKMS 3 noise
    goes to stderr: another package's broken tree (`Error! … File: … does not exist.`) and a
    `Deprecated feature: REMAKE_INITRD` warning written while each line is half printed (so
    `2>&1` shows `installedDeprecated feature: …`, as the real samples do)."""
    noisy = bool(faults().get("dkms-noise"))
    if noisy and not name:
        sys.stdout.flush()
        print(f"Error! Could not locate dkms.conf file.\nFile: {BROKEN_TREE} does not exist.",
              file=sys.stderr)
        sys.stderr.flush()
    for tree in sorted(Path("/var/lib/dkms").glob("*/*")):
        if not tree.is_dir() or tree.name in ("source", "original_module"):
            continue
        mod, ver = tree.parent.name, tree.name
        if name and mod != name:
            continue
        releases = [d.name for d in sorted(tree.iterdir()) if d.is_dir() and (d / ARCH).is_dir()]
        lines = [_status_line(mod, ver, rel, tree) for rel in releases if not kernels or rel in kernels]
        if not lines and not kernels:
            lines = [f"{mod}/{ver}: added"]
        for line in lines:
            if noisy:
                print("Deprecated feature: REMAKE_INITRD", file=sys.stderr)
                sys.stderr.flush()
                print(line, end="")
                sys.stdout.flush()
                print("Deprecated feature: REMAKE_INITRD", file=sys.stderr)
                sys.stderr.flush()
                print()
            else:
                print(line)
    return 0


def cmd_dkms(argv: list[str]) -> int:
    """`dkms status|add|build|install|autoinstall|remove|uninstall|unbuild`."""
    import shutil
    if not argv:
        raise Fail("Usage: dkms [action] [options]", 1)
    action, rest = argv[0], argv[1:]
    running = state()["release"]
    name, version, kernels, all_kernels = _dkms_target(rest)
    if action == "status":
        return _dkms_status(name, kernels)
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
    """`modinfo [-k REL] [-F FIELD] NAME|FILE`, printed as kmod prints it."""
    release = state()["release"]
    field = None
    name = None
    i = 0
    while i < len(argv):
        if argv[i] == "-k" and i + 1 < len(argv):
            release = argv[i + 1]
            i += 1
        elif argv[i] == "-F" and i + 1 < len(argv):
            field = argv[i + 1]
            i += 1
        elif argv[i].startswith("--field="):
            field = argv[i].split("=", 1)[1]
        else:
            name = argv[i]
        i += 1
    if not name:
        raise Fail("modinfo: ERROR: missing module or filename.")
    path = Path(name) if ".ko" in name else find_module(name, release)
    if path is None or not path.is_file():
        raise Fail(f"modinfo: ERROR: Module {name} not found.")
    rows = modfile.fields(str(path))
    if field is not None:
        for key, value in rows:
            if key == field:
                print(value if key != "signature" else modfile.render_field(key, value)[16:])
        return 0
    for key, value in rows:
        print(modfile.render_field(key, value))
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
        why = refusal(path, firmware())
        if why:
            raise Fail(f"modprobe: ERROR: could not insert '{name}': Key was rejected by service")
        loaded.append(name)
        options = B.parse_modprobe_options(sorted_conf("/etc/modprobe.d/*.conf"))
        extra = {k: v for a in argv if "=" in a for k, v in [a.split("=", 1)]}
        merged = param_defaults(name, path)
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
    """`depmod`: nothing to do in the lab (module lookups read the tree)."""
    return 0


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "dkms": cmd_dkms, "modinfo": cmd_modinfo, "modprobe": cmd_modprobe, "insmod": cmd_modprobe,
    "rmmod": lambda argv: cmd_modprobe(["-r", *argv]), "depmod": cmd_noop, "lsmod": cmd_lsmod,
}
