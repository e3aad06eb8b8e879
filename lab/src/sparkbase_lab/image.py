"""A node's disk: the factory image and the files refreshed at every `lab up`.

Everything here writes into the node's overlay upper dir from outside the node (the node
is not running). Directories the machine has but a Spark would not show through are made
opaque (`trusted.overlay.opaque`), so the machine's content stays invisible in the node.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from sparkbase.atomicfile import write_atomic
from sparkbase_lab import boot, packages

FACTORY_FORMAT = 1
SHIM_LIB = "usr/local/lib/sparkbase-lab"
SHIMS = Path(__file__).parent / "shims"
#: files of earlier layouts that `refresh` removes from a kept disk (sparkbase wrote them)
OLD_SHIM_FILES = ("node_commands.py", "node_query.py", "sparkbase_lab_boot.py")

#: machine directories hidden in every node (the node starts with them empty)
OPAQUE_DIRS = (
    "root", "boot", "usr/src", "usr/lib/modules", "etc/apt/sources.list.d", "etc/systemd/system",
    "etc/sysctl.d", "etc/modprobe.d", "etc/netplan", "etc/default/grub.d", "var/lib/dkms",
    "var/lib/shim-signed", "var/lib/apt/lists", "var/cache/apt", "etc/ssh/sshd_config.d",
    "var/lib/sparkbase-lab", "etc/sparkbase-lab", "opt/nccl-site",
)

#: machine directories a Spark has, but with the machine's own content (programs, mirrors,
#: users, mounts): hidden in every node at every `lab up`, disks built before too; the
#: lab's own files in them (shims, the preload library, a node's packages) are the node's
MACHINE_DIRS = ("usr/local", "opt", "home", "mnt", "srv")

#: the empty /usr/local tree Ubuntu's base-files installs (`man` is a link to `share/man`)
USR_LOCAL = ("bin", "etc", "games", "include", "lib", "sbin", "share/man", "src")

#: what the root directory of a DGX OS (Ubuntu 24.04) install holds; any other entry of
#: the machine's root (a checkout, a build tree, a mount) is hidden in the node by a
#: whiteout. The `lib*` directories stay: a node's programs are the machine's binaries.
SPARK_ROOT = frozenset({
    "bin", "boot", "cdrom", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "lost+found",
    "media", "mnt", "opt", "proc", "root", "run", "sbin", "snap", "srv", "swap.img", "swap-64k.img",
    "sys", "tmp", "usr", "var",
})

APT_CONF = """\
// sparkbase lab: the node's only package source is the lab repository
Acquire::Languages "none";
Acquire::GzipIndexes "false";
APT::Install-Recommends "false";
APT::Install-Suggests "false";
APT::Get::Assume-Yes "false";
Dpkg::Use-Pty "0";
Dpkg::Options { "--force-confdef"; "--force-confold"; };
DPkg::Post-Invoke { };
APT::Update::Post-Invoke-Success { };
Binary::apt::APT::Keep-Downloaded-Packages "false";
"""

DEFAULT_GRUB = """\
# If you change this file, run 'update-grub' afterwards to update
# /boot/grub/grub.cfg.
GRUB_DEFAULT=0
GRUB_TIMEOUT_STYLE=hidden
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=`( . /etc/os-release; echo ${NAME:-Ubuntu} ) 2>/dev/null || echo Ubuntu`
GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"
GRUB_CMDLINE_LINUX=""
"""

OS_RELEASE = """\
PRETTY_NAME="Ubuntu 24.04.3 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.3 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
UBUNTU_CODENAME=noble
"""

#: /etc/dgx-release as DGX OS 7 writes it on a Spark (real samples:
#: tests/fixtures/real/etc_dgx-release__*): the factory image's build, a blank line, then
#: one DGX_OTA_* pair per over-the-air update (appended; the last is what runs). The serial
#: number is per node (`dgx_release`).
DGX_RELEASE = """\
DGX_NAME="DGX Spark"
DGX_PRETTY_NAME="NVIDIA DGX Spark"
DGX_SWBUILD_DATE="2025-09-10-13-50-03"
DGX_SWBUILD_VERSION="7.2.3"
DGX_COMMIT_ID="833b4a7"
DGX_PLATFORM="DGX Server for KVM"
DGX_SERIAL_NUMBER="{serial}"

DGX_OTA_VERSION="7.5.0"
DGX_OTA_DATE="Thu Jun 18 17:40:28 EDT 2026"
"""


def dgx_release(name: str) -> str:
    """A node's /etc/dgx-release (its serial number derived from its name)."""
    import hashlib

    digits = int(hashlib.sha256(name.encode()).hexdigest(), 16) % 10**12
    return DGX_RELEASE.format(serial=f"1{digits:012d}")

SSHD_CONFIG = """\
# sparkbase lab node sshd (loopback only)
Port {port}
ListenAddress 127.0.0.1
AddressFamily inet
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding no
AcceptEnv LANG LC_*
Subsystem sftp internal-sftp
MaxStartups 50:30:100
MaxSessions 50
LoginGraceTime 30
"""

CANONICAL_KEY_SUBJECT = "C=GB, ST=Isle of Man, L=Douglas, O=Canonical Ltd., CN=Canonical Ltd. Master Certificate Authority"  # noqa: E501
CANONICAL_KEY_DER = b"0\x82\x04\x10" + b"sparkbase-lab stand-in: Canonical Ltd. Master CA" * 8
#: the Canonical Master CA every Ubuntu shim trusts, as `mokutil --list-enrolled` shows it
#: (fingerprint, serial, issuer and validity from the real sample
#: tests/fixtures/real/mokutil_--list-enrolled__ubuntu22.04_linux-surface-906.txt; the
#: public key is left out: the lab's stand-in DER is not the real certificate)
CANONICAL_KEY_FINGERPRINT = "76:a0:92:06:58:00:bf:37:69:01:c3:72:cd:55:a9:0e:1f:de:d2:e0"
CANONICAL_KEY_SERIAL = "B9:41:24:A0:18:2C:92:67"
CANONICAL_KEY_TEXT = f"""\
Certificate:
    Data:
        Version: 3 (0x2)
        Serial Number:
            {CANONICAL_KEY_SERIAL.lower()}
        Signature Algorithm: sha256WithRSAEncryption
        Issuer: {CANONICAL_KEY_SUBJECT}
        Validity
            Not Before: Apr 12 11:12:51 2012 GMT
            Not After : Apr 11 11:12:51 2042 GMT
        Subject: {CANONICAL_KEY_SUBJECT}
        Subject Public Key Info:
            Public Key Algorithm: rsaEncryption
                Public-Key: (2048 bit)
        X509v3 extensions:
            X509v3 Basic Constraints: critical
                CA:TRUE
            X509v3 Key Usage:
                Digital Signature, Certificate Sign, CRL Sign
    Signature Algorithm: sha256WithRSAEncryption
"""


#: the installer's swap file (Ubuntu's curtin makes `/swap.img`; real fstab sample:
#: tests/fixtures/real/etc_fstab__ubuntu_curtin_swap.img.txt). Its size is the lab's
#: choice (no Spark sample gives it); the file is sparse.
FACTORY_SWAP = "/swap.img"
FACTORY_SWAP_SIZE = 8 << 30


def factory_fstab(name: str) -> str:
    """/etc/fstab as the DGX OS installer (curtin) leaves it: root and ESP by UUID, then the
    4 KiB-page swap file, tab-separated, as in the real sample."""
    uuid = boot.root_uuid(name)
    return (
        "# /etc/fstab: static file system information.\n#\n"
        "# Use 'blkid' to print the universally unique identifier for a\n"
        "# device; this may be used with UUID= as a more robust way to name devices\n"
        "# that works even if disks are added and removed. See fstab(5).\n#\n"
        "# <file system> <mount point>   <type>  <options>       <dump>  <pass>\n"
        "# / was on /dev/nvme0n1p2 during curtin installation\n"
        f"/dev/disk/by-uuid/{uuid} / ext4 defaults 0 1\n"
        "# /boot/efi was on /dev/nvme0n1p1 during curtin installation\n"
        "/dev/disk/by-uuid/1A2B-3C4D /boot/efi vfat defaults 0 1\n"
        f"{FACTORY_SWAP}\tnone\tswap\tsw\t0\t0\n"
    )


def make_factory_swap(path: Path) -> None:
    """A sparse swap file with a 4 KiB-page header (the factory kernel's page size)."""
    import subprocess

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.truncate(FACTORY_SWAP_SIZE)
    path.chmod(0o600)
    subprocess.run(["/usr/sbin/mkswap", "--pagesize", "4096", str(path)], capture_output=True, check=True)


def _opaque(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.setxattr(path, "trusted.overlay.opaque", b"y")


def hide_machine(upper: Path, machine_root: Path = Path("/")) -> list[str]:
    """Make the machine's own content invisible in the node: `MACHINE_DIRS` opaque, and a
    whiteout (overlayfs: a 0/0 character device) for every entry of the machine's root a
    Spark does not have. Entries the node itself made are kept. Returns what it hid."""
    for rel in MACHINE_DIRS:
        _opaque(upper / rel)
    for rel in USR_LOCAL:  # Ubuntu's empty /usr/local tree (base-files) stays
        (upper / "usr/local" / rel).mkdir(parents=True, exist_ok=True)
    if not (upper / "usr/local/man").is_symlink():
        _symlink(upper, "usr/local/man", "share/man")
    hidden = []
    for name in sorted(os.listdir(machine_root)):
        target = upper / name
        if name in SPARK_ROOT or target.exists() or target.is_symlink():
            continue
        os.mknod(target, 0o600 | stat.S_IFCHR, os.makedev(0, 0))
        hidden.append(name)
    return hidden


def _write(upper: Path, rel: str, text: str, mode: int = 0o644) -> Path:
    target = upper / rel.lstrip("/")
    # a node image is rebuilt from scratch when lost: atomic for readers, no fsync
    write_atomic(target, text, mode, durable=False)
    return target


def _symlink(upper: Path, rel: str, dest: str) -> None:
    link = upper / rel.lstrip("/")
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(dest)


def factory_firmware() -> dict[str, object]:
    """Firmware of a new node: Secure Boot on, one pre-enrolled (Canonical) key."""
    import base64

    return {
        "format": 1,
        "secure_boot": True,
        "enrolled": [
            {
                "fingerprint": CANONICAL_KEY_FINGERPRINT,
                "serial": CANONICAL_KEY_SERIAL,
                "issuer": CANONICAL_KEY_SUBJECT,
                "subject": CANONICAL_KEY_SUBJECT,
                "text": CANONICAL_KEY_TEXT,
                "der": base64.b64encode(CANONICAL_KEY_DER).decode(),
            }
        ],
        "pending": [],
    }


def build_factory(upper: Path, firmware_dir: Path, name: str = "spark") -> None:
    """Lay a factory-fresh DGX OS node into an empty upper dir."""
    for rel in OPAQUE_DIRS:
        _opaque(upper / rel)
    root = upper / "root"
    root.chmod(0o700)
    for skel in Path("/etc/skel").iterdir():
        if skel.is_file():
            shutil.copy2(skel, root / skel.name)
    for sub in ("var/lib/apt/lists/partial", "var/cache/apt/archives/partial"):
        (upper / sub).mkdir(parents=True, exist_ok=True)
    _write(upper, "etc/apt/sources.list", "deb [trusted=yes] file:/srv/sparkbase-lab/apt ./\n")
    _write(upper, "etc/apt/apt.conf.d/99sparkbase-lab", APT_CONF)
    _write(upper, "etc/os-release", OS_RELEASE)
    _write(upper, "etc/dgx-release", dgx_release(name))
    _write(upper, "etc/default/grub", DEFAULT_GRUB)
    packages.install_offline(packages.factory_packages(), upper, Path("/var/lib/dpkg/status"))
    settings = boot.grub_settings(DEFAULT_GRUB, [])
    cfg = boot.render_grub_cfg([packages.FACTORY_KERNEL], settings, boot.root_uuid(name))
    _write(upper, "boot/grub/grub.cfg", cfg)
    _write(upper, "boot/grub/grubenv", boot.render_grubenv({}))
    from sparkbase_lab.shims.cmd_kernel import initrd_text

    _write(upper, f"boot/initrd.img-{packages.FACTORY_KERNEL}",
           initrd_text(packages.FACTORY_KERNEL, packages.factory_modprobe_text(),
                       packages.factory_modprobe_files()))
    lib = "/lib/systemd/system"
    _symlink(upper, "etc/systemd/system/default.target", f"{lib}/graphical.target")
    _symlink(upper, "etc/systemd/system/display-manager.service", f"{lib}/gdm3.service")
    _symlink(
        upper,
        "etc/systemd/system/graphical.target.wants/gnome-remote-desktop.service",
        f"{lib}/gnome-remote-desktop.service",
    )
    _symlink(upper, "etc/systemd/system/multi-user.target.wants/cups.service", f"{lib}/cups.service")
    for unit in ("snapd.service", "nv-cpu-governor.service", "dgx-dashboard.service",
                 "dgx-dashboard-admin.service", "cups-browsed.service",
                 "nvidia-nvme-interrupt-coalescing.service"):
        _symlink(upper, f"etc/systemd/system/multi-user.target.wants/{unit}", f"{lib}/{unit}")
    for unit in ("snapd.snap-repair.timer", "fwupd-refresh.timer"):
        _symlink(upper, f"etc/systemd/system/timers.target.wants/{unit}", f"{lib}/{unit}")
    for unit in ("cups.socket", "snapd.socket"):
        _symlink(upper, f"etc/systemd/system/sockets.target.wants/{unit}", f"{lib}/{unit}")
    for unit in ("cups.path", "snapd.seeded.service"):
        _symlink(upper, f"etc/systemd/system/multi-user.target.wants/{unit}", f"{lib}/{unit}")
    _symlink(upper, "etc/systemd/system/bluetooth.target.wants/bluetooth.service", f"{lib}/bluetooth.service")
    _symlink(upper, "etc/systemd/system/dbus-org.bluez.service", f"{lib}/bluetooth.service")
    if Path(lib, "ssh.service").exists():
        _symlink(upper, "etc/systemd/system/multi-user.target.wants/ssh.service", f"{lib}/ssh.service")
    _write(upper, "etc/fstab", factory_fstab(name))
    make_factory_swap(upper / FACTORY_SWAP.lstrip("/"))
    _write(upper, "etc/modprobe.d/nvidia-graphics-drivers-kms.conf",
           "# This file was generated by nvidia-kernel-common\noptions nvidia-drm modeset=0\n")
    _write(upper, "etc/sysctl.conf", "# /etc/sysctl.conf - see sysctl.conf(5)\n")
    _write(upper, "etc/sparkbase-lab/factory", f"format={FACTORY_FORMAT}\n")
    firmware_dir.mkdir(parents=True, exist_ok=True)
    (firmware_dir / "firmware.json").write_text(json.dumps(factory_firmware(), indent=1) + "\n")
    (firmware_dir / "faults.json").write_text("{}\n")


def is_factory_built(upper: Path) -> bool:
    """Whether `upper` already holds a node disk."""
    return (upper / "etc/sparkbase-lab/factory").exists()


def refresh(
    upper: Path, name: str, index: int, port: int, host_key: Path, client_pub: str,
    preload: Path | None = None, client: Path | None = None,
) -> None:
    """Files written at every `lab up`: identity, sshd, keys, shims (the commands are
    copies of the C `client` when there is one), and the node's `/etc/ld.so.preload`
    naming the preload library (`preload`; none: no preload file)."""
    hide_machine(upper)
    _write(upper, "etc/hostname", f"{name}\n")
    _write(upper, "etc/hosts", f"127.0.0.1\tlocalhost\n127.0.1.1\t{name}\n"
           "::1\tlocalhost ip6-localhost ip6-loopback\n")
    identity = {"name": name, "index": index, "port": port}
    _write(upper, "etc/sparkbase-lab/node.json", json.dumps(identity) + "\n")
    _write(upper, "etc/ssh/sshd_config", SSHD_CONFIG.format(port=port))
    _write(upper, "etc/ssh/ssh_host_ed25519_key", host_key.read_text(), 0o600)
    _write(upper, "etc/ssh/ssh_host_ed25519_key.pub", host_key.with_suffix(".pub").read_text())
    ssh_dir = upper / "root/.ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    ssh_dir.chmod(0o700)
    _write(upper, "root/.ssh/authorized_keys", client_pub, 0o600)
    install_shims(upper, client)
    install_preload(upper, preload)
    (upper / "var/lib/sparkbase-lab").mkdir(parents=True, exist_ok=True)


def install_preload(upper: Path, library: Path | None) -> None:
    """The preload library and the node's /etc/ld.so.preload naming it, or neither (a
    preload file naming a missing library would make every program complain)."""
    from sparkbase_lab import preload

    target = upper / preload.NODE_PATH.lstrip("/")
    if library is None:
        (upper / "etc/ld.so.preload").unlink(missing_ok=True)
        target.unlink(missing_ok=True)
        return
    write_atomic(target, library.read_bytes(), 0o755, durable=False)
    _write(upper, "etc/ld.so.preload", preload.NODE_PATH + "\n")


def install_shims(upper: Path, client: Path | None = None) -> None:
    """The node commands: the `sparkbase_lab.shims` package (with `sparkbase_lab.boot`)
    under /usr/local/lib/sparkbase-lab, one entry per command in /usr/local/bin, and
    /usr/sbin shadows for commands that could reach the machine.

    An entry is a copy of the C `client` (it asks the node's command server, shims/shimd.py,
    and runs `python3 -IS shim.py COMMAND` itself when the server is not there), or a python
    wrapper for commands the server does not run (`registry.NOT_SERVED`) and for every
    command when there is no client (no C compiler)."""
    from sparkbase_lab.shims import registry

    lib = f"{SHIM_LIB}/sparkbase_lab"
    for package in ("", "/shims"):
        _write(upper, f"{lib}{package}/__init__.py", "")
    _write(upper, f"{lib}/boot.py", Path(boot.__file__).read_text())
    for source in sorted(SHIMS.glob("*.py")):
        if source.name != "__init__.py":
            _write(upper, f"{lib}/shims/{source.name}", source.read_text())
    _write(upper, f"{SHIM_LIB}/shim.py", (SHIMS / "shim.py").read_text())
    for old in OLD_SHIM_FILES:
        (upper / SHIM_LIB / old).unlink(missing_ok=True)
    # the package's place before the lab was its own distribution (sparkbase.lab)
    shutil.rmtree(upper / SHIM_LIB / "sparkbase", ignore_errors=True)
    client_bytes = client.read_bytes() if client is not None else None
    for command in registry.commands():
        if client_bytes is not None and command not in registry.NOT_SERVED:
            write_atomic(upper / f"usr/local/bin/{command}", client_bytes, 0o755, durable=False)
            continue
        _write(
            upper,
            f"usr/local/bin/{command}",
            # -I -S: isolated, no `site` (no .pth files, no dist-packages scan): the
            # commands need the standard library only (netplan adds dist-packages itself)
            "#!/usr/bin/python3 -IS\nimport sys\n"
            f"sys.path.insert(0, '/{SHIM_LIB}')\n"
            "from sparkbase_lab.shims.registry import main\n"
            f"sys.exit(main({command!r}, sys.argv[1:]))\n",
            0o755,
        )
    for command in registry.SBIN_SHADOWS:
        _symlink(upper, f"usr/sbin/{command}", f"/usr/local/bin/{command}")
