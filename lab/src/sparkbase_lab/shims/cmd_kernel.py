"""`uname`, `getconf`, `nproc`: the running kernel and CPUs as the node's boot chose them."""

from __future__ import annotations

import os

from sparkbase_lab.shims.common import ARCH, Fail, LazyModule, read_text, state

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from sparkbase_lab import boot as B
else:
    B = LazyModule("sparkbase_lab.boot")

#: the kernel build line `uname -v` prints (Ubuntu's format)
KERNEL_BUILD = "SMP PREEMPT_DYNAMIC Thu Oct  9 10:00:00 UTC 2025"


def kernel_version(release: str) -> str:
    """`uname -v` for a release: `#<ABI>-Ubuntu SMP PREEMPT_DYNAMIC <date>`."""
    return f"#{release.split('-')[1]}-Ubuntu {KERNEL_BUILD}"


def cmd_uname(argv: list[str]) -> int:
    """`uname [-snrvmpioa]` and the long forms."""
    release = state()["release"]
    fields = {"s": "Linux", "n": os.uname().nodename, "r": release, "v": kernel_version(release),
              "m": ARCH, "p": ARCH, "i": ARCH, "o": "GNU/Linux"}
    long = {"--kernel-name": "s", "--nodename": "n", "--kernel-release": "r",
            "--kernel-version": "v", "--machine": "m", "--processor": "p",
            "--hardware-platform": "i", "--operating-system": "o", "--all": "a"}
    wanted: list[str] = []
    for arg in argv:
        if arg in long:
            wanted.append(long[arg])
        elif arg.startswith("-") and not arg.startswith("--"):
            wanted.extend(arg[1:])
        else:
            raise Fail(f"uname: extra operand '{arg}'")
    if not wanted:
        wanted = ["s"]
    if "a" in wanted:
        wanted = list("snrvmpio")
    unknown = [w for w in wanted if w not in fields]
    if unknown:
        raise Fail(f"uname: invalid option -- '{unknown[0]}'")
    print(" ".join(fields[k] for k in "snrvmpio" if k in wanted))
    return 0


def cmd_getconf(argv: list[str]) -> int:
    """`getconf PAGESIZE` (the node's page size); other variables from the machine's getconf."""
    if len(argv) == 1 and argv[0] in ("PAGESIZE", "PAGE_SIZE"):
        print(state()["page_size"])
        return 0
    if len(argv) == 1 and argv[0] in ("_NPROCESSORS_ONLN", "_NPROCESSORS_CONF"):
        print(B.NCPUS)
        return 0
    import subprocess

    return subprocess.call(["/usr/bin/getconf", *argv])


def cmd_nproc(argv: list[str]) -> int:
    """`nproc`: the node's 20 CPUs."""
    print(B.NCPUS)
    return 0


#: modules the initramfs loads: their modprobe.d options act from the image, as packed when
#: it was built, until `update-initramfs` rebuilds it (why the recipe rebuilds it after
#: purging DGX OS's nvidia-drm modeset override: spark-ds41f docs/setup.md)
INITRAMFS_MODULES = ("nvidia_drm",)
#: the line that says an image packs modprobe.d options (`modprobe=` lines follow)
PACKED_OPTIONS = "modprobe.d=packed"


#: the line prefix of a file an image packs (its path, a space, its bytes in base64)
PACKED_FILE = "file="


def initrd_text(release: str, modprobe_text: str = "", files: Mapping[str, str] | None = None) -> str:
    """A stand-in initramfs image for `release` (text; what it would pack is named), with the
    `options` lines of `modprobe_text` (the modprobe.d files) for the modules it loads, and
    `files` (path -> text) packed whole, as initramfs-tools copies /etc/modprobe.d/*.conf
    into every image (`unmkinitramfs` unpacks them)."""
    import base64  # not at the top: `uname` imports this module and must stay light

    packed = [
        f"modprobe={line.strip()}"
        for line in modprobe_text.splitlines()
        if line.split("#", 1)[0].split()[:1] == ["options"]
        and len(line.split()) > 1 and line.split()[1].replace("-", "_") in INITRAMFS_MODULES
    ]
    packed += [f"{PACKED_FILE}{path} {base64.b64encode(text.encode()).decode()}"
               for path, text in sorted((files or {}).items())]
    return (f"sparkbase-lab initramfs\nrelease={release}\nmodules=/lib/modules/{release}\n{PACKED_OPTIONS}\n"
            + "".join(f"{line}\n" for line in packed))


def packed_files(text: str) -> dict[str, bytes]:
    """The files a stand-in image packs: path -> bytes."""
    import base64

    out: dict[str, bytes] = {}
    for line in text.splitlines():
        if line.startswith(PACKED_FILE):
            path, _, data = line[len(PACKED_FILE):].partition(" ")
            out[path] = base64.b64decode(data)
    return out


def cmd_unmkinitramfs(argv: list[str]) -> int:
    """`unmkinitramfs [-v] IMAGE DIR`: unpack a stand-in image's files under DIR (an arm64
    image has no early microcode archive, so they land in DIR itself, not DIR/main)."""
    words = [a for a in argv if not a.startswith("-")]
    if len(words) != 2:
        raise Fail("Usage: unmkinitramfs [-v] initramfs-file directory", 2)
    image, directory = words
    text = read_text(image) if os.path.isfile(image) else ""
    if not text.startswith("sparkbase-lab initramfs\n"):
        raise Fail(f"cpio: premature end of archive ({image})", 1)
    for path, data in packed_files(text).items():
        target = os.path.join(directory, path.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as fh:
            fh.write(data)
    return 0


def initramfs_options(release: str) -> dict[str, dict[str, str]]:
    """The options of the initramfs modules as `release`'s image packed them (empty for an
    image that packs none, or no image: then /etc/modprobe.d as it is counts)."""
    image = f"/boot/initrd.img-{release}"
    text = read_text(image) if os.path.isfile(image) else ""
    if PACKED_OPTIONS not in text.splitlines():
        return {}
    lines = [line[len("modprobe="):] for line in text.splitlines() if line.startswith("modprobe=")]
    packed = B.parse_modprobe_options(lines)
    return {module: packed.get(module, {}) for module in INITRAMFS_MODULES}


def cmd_update_initramfs(argv: list[str]) -> int:
    """`update-initramfs -c|-u|-d -k RELEASE|all`: create, update or delete
    `/boot/initrd.img-RELEASE` (`-u` without `-k`: the newest kernel's)."""
    from sparkbase_lab.shims.common import boot_log, glob, write_text

    mode = next((a for a in argv if a in ("-c", "-u", "-d")), "")
    if not mode:
        raise Fail("Usage: update-initramfs {-c|-d|-u} [-k version] [-v] [-b directory]", 2)
    version = argv[argv.index("-k") + 1] if "-k" in argv and argv.index("-k") + 1 < len(argv) else ""
    installed = sorted((p[len("/boot/vmlinuz-"):] for p in glob("/boot/vmlinuz-*")), key=B.version_key)
    if version == "all":
        releases = installed
    elif version:
        releases = [version]
    else:
        releases = installed[-1:]
    for release in releases:
        image = f"/boot/initrd.img-{release}"
        if mode == "-d":
            if os.path.exists(image):
                os.unlink(image)
            continue
        if mode == "-c" and not os.path.isdir(f"/lib/modules/{release}"):
            raise Fail(f"update-initramfs: /lib/modules/{release} does not exist. Cannot continue.", 1)
        if mode == "-u" and not os.path.exists(image):
            continue
        print(f"update-initramfs: Generating {image}")
        files = {path: read_text(path) for path in sorted(glob("/etc/modprobe.d/*.conf"))}
        write_text(image, initrd_text(release, "".join(files.values()), files))
        boot_log(f"update-initramfs {mode} -k {release}: generated {image}")
    return 0


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "uname": cmd_uname, "getconf": cmd_getconf, "nproc": cmd_nproc,
    "update-initramfs": cmd_update_initramfs, "unmkinitramfs": cmd_unmkinitramfs,
}
