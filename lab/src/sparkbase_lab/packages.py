"""Stand-in Debian packages for the lab: the catalogue (as data) and the repository builder.

Every package is `Architecture: all`, has no dependencies and no slow maintainer scripts
(kernel images run the `update-grub` shim from `postinst`, as Ubuntu's do, which takes a
few milliseconds). `build_repo` writes a flat apt repository (`Packages`, `Release`, one
`.deb` per package version) and reuses it when the catalogue hash is unchanged.
`install_offline` lays packages into a node's overlay upper dir and registers them in the
node's dpkg database, so the factory image is built without running dpkg in the node.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sparkbase.deploy.sources import LAB_MIRROR_DIR
from sparkbase_lab.kconfig import kernel_config

#: kernel release -> Debian package version
KERNELS: dict[str, str] = {
    "6.17.0-1008-nvidia": "6.17.0-1008.8",
    "6.17.0-1032-nvidia": "6.17.0-1032.32",
    "7.0.0-1019-nvidia-64k": "7.0.0-1019.19",
}
#: NVIDIA driver versions the repository carries
DRIVERS: tuple[str, ...] = ("580.95.05", "580.126.09", "580.178.04")
FACTORY_KERNEL = "6.17.0-1008-nvidia"
FACTORY_DRIVER = "580.95.05"
SITE_DRIVER = "580.126.09"
VARIANT_DRIVER = "580.178.04"
#: kernels as Ubuntu's archive versions them (`~24.04.N` for backports), each with the one
#: NVIDIA module package built for it: versioned as the kernel package plus `+1` (as
#: linux-modules-nvidia-580-open-6.17.0-1032-nvidia=6.17.0-1032.32+1 on a real fleet), the
#: driver it carries named here. release -> (kernel package version, driver)
UBUNTU_KERNELS: dict[str, tuple[str, str]] = {
    "6.17.0-1032-nvidia": ("6.17.0-1032.32", SITE_DRIVER),
    "7.0.0-1019-nvidia-64k": ("7.0.0-1019.19~24.04.2", VARIANT_DRIVER),
    "7.0.0-1019-nvidia": ("7.0.0-1019.19~24.04.2", VARIANT_DRIVER),
}
#: nvidia-utils-580 as Ubuntu versions it (`<driver>-0ubuntu0.24.04.1`)
UBUNTU_UTILS: dict[str, str] = {d: f"{d}-0ubuntu0.24.04.1" for d in (SITE_DRIVER, VARIANT_DRIVER)}

NCCL_SITE_PACKAGE = "nccl-site-ring4"
NCCL_SITE_VERSION = "2.27.7-1+site.ring4.p3"
NCCL_SITE_PATH = "/opt/nccl-site/lib/libnccl.so.2.27.7"
NCCL_STOCK_PACKAGE = "libnccl2"
NCCL_STOCK_VERSION = "2.28.9-1+cuda13.0"
NCCL_STOCK_PATH = "/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9"
NVIDIA_UTILS_VERSION_FILE = "/usr/share/sparkbase-lab/nvidia-utils.version"
#: the recipe registers a checkout of christopherowen/dgx-spark-memory-saver with `dkms add`;
#: the lab (and a site) ships that checkout as a package holding /usr/src/NAME-VERSION
MEMORY_SAVER_PACKAGE = "dgx-spark-memory-saver"
#: a DKMS package only the lab's own tests install (any kernel, a module of its own name)
LAB_DKMS_PACKAGE = "uvm-memory-saver-dkms"
LAB_DKMS_VERSION = "0.4.2-1"
MEMORY_SAVER_VERSION = "0.2.0-1"
#: the srcversion of the patched nvidia-uvm built from revision 2dd6ef1 (spark-ds41f
#: config/kernel-trial.json, f2089eda); the lab's build prints it as modpost would
MEMORY_SAVER_SRCVERSION = "34683B82C2D3339BBD2EEC9"

#: fan control: the checkout of christopherowen/dgx-spark-fan-control shipped as a package
#: (DKMS source, daemon, unit); DKMS 0.1.3 is what the recipe's fleet had installed
#: (spark-ds41f experiments/2026-10-02-kernel-64k/boot-test/dgx1-trial-inventory.json, 24b8aafc)
FAN_PACKAGE = "dgx-spark-fan-control"
FAN_PACKAGE_VERSION = "0.1.3-1"
FAN_DKMS_NAME = "dgx-spark-fan-control"
FAN_DKMS_VERSION = "0.1.3"
#: DGX OS's nvidia-drm modeset override: version 25.07-1 owns
#: /etc/modprobe.d/zz-nvidia-drm-override.conf holding `options nvidia-drm modeset=0` (a
#: public inspection of a DGX Spark, docs/sources/ds41f-research.md); DGX OS ships it installed
MODESET0_PACKAGE = "nvidia-drm-options-modeset0"
MODESET0_VERSION = "25.07-1"
MODESET0_FILE = "/etc/modprobe.d/zz-nvidia-drm-override.conf"

#: NVIDIA's kernel source package (one per driver, at nvidia-utils' Debian version)
KERNEL_SOURCE_PACKAGE = "nvidia-kernel-source-580-open"
#: the memory saver's repository and the revision the recipe pins (spark-ds41f
#: config/kernel-trial.json, f2089eda): the lab serves a stand-in checkout of it as a tarball
MEMORY_SAVER_REPOSITORY = "https://github.com/christopherowen/dgx-spark-memory-saver.git"
MEMORY_SAVER_REVISION = "2dd6ef107616ef13f1c7f87817c07e5aabc9199e"

#: bumped whenever the way packages are built changes (forces a repository rebuild)
REPO_FORMAT = 4


@dataclass(frozen=True)
class PackageFile:
    """One file a package installs: absolute path, content, mode."""

    path: str
    content: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class Package:
    """One stand-in package version."""

    name: str
    version: str
    description: str
    section: str = "misc"
    files: tuple[PackageFile, ...] = ()
    #: (link path, target) pairs
    symlinks: tuple[tuple[str, str], ...] = ()
    postinst: str = ""
    extra_fields: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @property
    def deb_name(self) -> str:
        """File name of the package's .deb in the repository."""
        return f"{self.name}_{self.version}_all.deb"

    def control(self) -> str:
        """The DEBIAN/control text."""
        lines = [
            f"Package: {self.name}",
            f"Version: {self.version}",
            "Architecture: all",
            "Maintainer: sparkbase lab <lab@sparkbase.invalid>",
            f"Section: {self.section}",
            "Priority: optional",
            *(f"{key}: {value}" for key, value in self.extra_fields),
            f"Description: {self.description}",
            " Stand-in package of the sparkbase emulated fleet.",
        ]
        return "\n".join(lines) + "\n"


def _deterministic_bytes(seed: str, size: int) -> bytes:
    """`size` bytes derived from `seed` by chained SHA-256 (stable across runs)."""
    out = bytearray()
    block = hashlib.sha256(seed.encode()).digest()
    header = b"\x7fELF\x02\x01\x01\x00" + f"sparkbase-lab {seed}\n".encode()
    out += header
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


NCCL_SITE_BYTES = _deterministic_bytes("libnccl.so.2.27.7 site ring4 p3", 384 * 1024)
NCCL_STOCK_BYTES = _deterministic_bytes("libnccl.so.2.28.9 cuda13.0", 320 * 1024)
#: sha256 of the site's patched NCCL library file (put this in baselines)
NCCL_SITE_SHA256 = hashlib.sha256(NCCL_SITE_BYTES).hexdigest()
#: sha256 of the stock NCCL library file the variant uses
NCCL_STOCK_SHA256 = hashlib.sha256(NCCL_STOCK_BYTES).hexdigest()


def library_sha256(path: str) -> str:
    """sha256 of the stand-in library installed at `path` (KeyError if not one)."""
    return {NCCL_SITE_PATH: NCCL_SITE_SHA256, NCCL_STOCK_PATH: NCCL_STOCK_SHA256}[path]


def nvidia_module_version(package_version: str, release: str = "") -> str:
    """Driver version from a `linux-modules-nvidia-580-open-<release>` package version:
    `<driver>-0ubuntu1+<kver>`, or Ubuntu's `<kver>+1` (then the driver is the one
    UBUNTU_KERNELS names for `release`)."""
    if release in UBUNTU_KERNELS and package_version == f"{UBUNTU_KERNELS[release][0]}+1":
        return UBUNTU_KERNELS[release][1]
    return package_version.split("-", 1)[0]


def memory_saver_checkout() -> list[tuple[str, str, int]]:
    """The stand-in checkout of the memory saver: (path in the checkout, text, mode). Its
    dkms.conf is the saver's (5971feb9: builds nvidia-uvm, 64 KiB kernel only, MAKE through
    scripts/driver-build, which reads NVIDIA's packaged kernel source); the lab's DKMS turns
    nvidia-uvm.c into a module file whose srcversion is the recipe's."""
    return [
        ("dkms.conf",
         'PACKAGE_NAME="dgx-spark-memory-saver"\nPACKAGE_VERSION="0.2.0"\n'
         'BUILT_MODULE_NAME[0]="nvidia-uvm"\n'
         'DEST_MODULE_LOCATION[0]="/updates/dkms"\n'
         "MAKE[0]=\"./scripts/driver-build build-dkms --kernel '${kernelver}' "
         "--headers '${kernel_source_dir}'\"\n"
         'BUILD_EXCLUSIVE_KERNEL="^7[.]0[.]0-1019-nvidia-64k$"\nAUTOINSTALL="yes"\n', 0o644),
        ("nvidia-uvm.c",
         "/* sparkbase-lab stand-in source */\n"
         f"/* sparkbase-lab srcversion: {MEMORY_SAVER_SRCVERSION} */\n"
         "static bool uvm_pack_sysmem_leaf_tables = true;\n"
         "module_param(uvm_pack_sysmem_leaf_tables, bool, 0444);\n"
         # the saver patches the driver's own nvidia-uvm source, whose MODULE_VERSION is the
         # driver's (NV_VERSION_STRING): the recipe's kernel_readiness.py (0ad64e14) wants
         # modinfo's version = the driver
         f'MODULE_VERSION("{VARIANT_DRIVER}");\n', 0o644),
        ("Makefile", "obj-m += nvidia-uvm.o\n", 0o644),
        ("scripts/driver-build", "#!/bin/sh\necho 'driver-build (sparkbase lab stand-in)'\n", 0o755),
    ]


def source_tarballs() -> dict[str, bytes]:
    """The DKMS source tarballs the lab serves beside its apt repository (the site's source
    mirror, `sparkbase.deploy.sources`): NAME-REVISION.tar.gz, one top directory as the
    repository host's archive of a revision has it; byte-for-byte reproducible (fixed times,
    owners and order, gzip without a time stamp), so the baseline can pin its sha256."""
    import gzip
    import io
    import tarfile

    name = MEMORY_SAVER_PACKAGE
    top = f"{name}-{MEMORY_SAVER_REVISION}"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, text, mode in sorted(memory_saver_checkout()):
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{path}")
            info.size, info.mode, info.mtime = len(data), mode, 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0) as gz:
        gz.write(raw.getvalue())
    return {f"{name}-{MEMORY_SAVER_REVISION}.tar.gz": packed.getvalue()}


def _text(path: str, text: str, mode: int = 0o644) -> PackageFile:
    return PackageFile(path, text.encode(), mode)


def _kernel_postinst(release: str) -> str:
    """A kernel image's postinst as Ubuntu's hooks run it: the initramfs, then GRUB."""
    return f"""#!/bin/sh
set -e
if [ "$1" = configure ]; then
    if command -v update-initramfs >/dev/null 2>&1; then
        update-initramfs -c -k {release} >/dev/null 2>&1 || true
    fi
    if command -v update-grub >/dev/null 2>&1; then
        update-grub >/dev/null 2>&1 || true
    fi
fi
exit 0
"""


def _initramfs_postinst(release: str) -> str:
    """Build the initramfs once both the kernel image and its modules are there."""
    return f"""#!/bin/sh
set -e
if [ "$1" = configure ] && [ -e /boot/vmlinuz-{release} ]; then
    update-initramfs -c -k {release} >/dev/null 2>&1 || true
fi
exit 0
"""


def _module_file(
    path: str, name: str, release: str, version: str | None = None, **fields: str
) -> PackageFile:
    """A stand-in stock module file (`key=value` lines in kmod's field order)."""
    lines = ["sparkbase-lab module"]
    if version:
        lines.append(f"version={version}")
    lines += [f"{key}={value}" for key, value in fields.items()]
    lines += [f"name={name}", f"vermagic={release} SMP preempt mod_unload modversions aarch64"]
    return _text(path, "\n".join(lines) + "\n")


def _kernel_packages(release: str, kver: str, lrms: list[tuple[str, str]] | None = None) -> list[Package]:
    """Image, headers and modules of `release` at `kver`, and the NVIDIA module packages
    `lrms` ((package version, driver); default one per driver, `<driver>-0ubuntu1+<kver>`)."""
    image = Package(
        f"linux-image-{release}",
        kver,
        f"Linux kernel image for version {release} (lab stand-in)",
        section="kernel",
        files=(
            _text(f"/boot/vmlinuz-{release}", f"sparkbase-lab kernel image\nrelease={release}\n"),
            _text(f"/boot/config-{release}", kernel_config(release)),
            _text(f"/boot/System.map-{release}", f"{release}\n"),
        ),
        postinst=_kernel_postinst(release),
    )
    headers = Package(
        f"linux-headers-{release}",
        kver,
        f"Linux kernel headers for version {release} (lab stand-in)",
        section="kernel",
        files=(
            _text(
                f"/usr/src/linux-headers-{release}/Makefile",
                f"# sparkbase-lab stand-in headers\nKERNELRELEASE = {release}\n",
            ),
        ),
        symlinks=((f"/lib/modules/{release}/build", f"/usr/src/linux-headers-{release}"),),
    )
    modules = Package(
        f"linux-modules-{release}",
        kver,
        f"Linux kernel modules for version {release} (lab stand-in)",
        section="kernel",
        files=(
            _text(f"/lib/modules/{release}/modules.dep", ""),
            _text(f"/lib/modules/{release}/modules.order", ""),
            _module_file(f"/lib/modules/{release}/kernel/drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.ko",
                         "mlx5_core", release, license="Dual BSD/GPL",
                         description="Mellanox 5th generation network adapters (ConnectX series) core driver",
                         depends="mlxfw,psample,tls,pci-hyperv-intf"),
            _module_file(f"/lib/modules/{release}/kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko",
                         "mlx5_ib", release, license="Dual BSD/GPL",
                         description="Mellanox 5th generation network adapters (ConnectX series) IB driver",
                         depends="mlx5_core,ib_uverbs,ib_core"),
        ),
        # Ubuntu's image depends on its modules, so its postinst always finds them; the
        # stand-ins have no dependencies, so whichever of the two is configured last builds
        # the initramfs
        postinst=_initramfs_postinst(release),
    )
    out = [image, headers, modules, _tools_package(release, kver)]
    for lrm_version, driver in lrms if lrms is not None else [(f"{d}-0ubuntu1+{kver}", d) for d in DRIVERS]:
        out.append(
            Package(
                f"linux-modules-nvidia-580-open-{release}",
                lrm_version,
                f"NVIDIA 580 open kernel modules for {release} (lab stand-in)",
                section="kernel",
                files=tuple(
                    _module_file(f"/lib/modules/{release}/kernel/nvidia-580-open/{file}.ko",
                                 file.replace("-", "_"), release, driver, license=lic, depends=deps)
                    for file, lic, deps in (
                        ("nvidia", "Dual MIT/GPL", ""),
                        ("nvidia-uvm", "Dual MIT/GPL", "nvidia"),
                        ("nvidia-modeset", "Dual MIT/GPL", "nvidia"),
                        ("nvidia-drm", "Dual MIT/GPL", "nvidia-modeset,drm_kms_helper,drm"),
                    )
                ),
            )
        )
    return out


#: the lab's cpupower for one kernel: the node command `cpupower` (shims/cmd_hw.py), which
#: is not on PATH: only Ubuntu's wrapper /usr/bin/cpupower (linux-tools-common) runs it
_CPUPOWER = ("#!/usr/bin/python3 -IS\nimport sys\nsys.path.insert(0, '/usr/local/lib/sparkbase-lab')\n"
             "from sparkbase_lab.shims.registry import main\nsys.exit(main('cpupower', sys.argv[1:]))\n")


def _tools_package(release: str, kver: str) -> Package:
    """`linux-tools-<release>`: cpupower built for that kernel, where Ubuntu's wrapper looks."""
    return Package(
        f"linux-tools-{release}",
        kver,
        f"Linux kernel version specific tools for version {release} (lab stand-in)",
        section="devel",
        files=(_text(f"/usr/lib/linux-tools/{release}/cpupower", _CPUPOWER, 0o755),),
    )


#: the fixed stand-in packages (DGX OS desktop and services, DGX tuning tools), as data
FIXED_CATALOGUE = Path(__file__).with_name("catalogue.json")
_PACKAGE_KEYS = frozenset({"name", "version", "description", "section", "files"})
_FILE_KEYS = frozenset({"path", "mode", "lines", "source"})


def _fixed_file(entry: object, where: str) -> PackageFile:
    if not isinstance(entry, dict) or not {"path", "lines"} <= entry.keys() <= _FILE_KEYS:
        raise ValueError(f"{where}: a file is {{path, lines, mode?, source?}}, not {entry!r}")
    lines = entry["lines"]
    if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
        raise ValueError(f"{where} {entry['path']}: lines must be a list of strings")
    return PackageFile(str(entry["path"]), "".join(f"{line}\n" for line in lines).encode(),
                       int(str(entry.get("mode", "0644")), 8))


def load_fixed_packages(path: Path = FIXED_CATALOGUE) -> list[Package]:
    """The fixed packages `path` (catalogue.json) lists, in its order; ValueError naming the
    entry that is not one."""
    document = json.loads(path.read_text())
    if document.get("format") != 1:
        raise ValueError(f"{path}: format {document.get('format')!r}, expected 1")
    out = []
    for index, entry in enumerate(document["packages"]):
        where = f"{path.name} package {index}"
        required = {"name", "version", "description"}
        if not isinstance(entry, dict) or not required <= entry.keys() <= _PACKAGE_KEYS:
            raise ValueError(f"{where}: keys must be name, version, description, section?, files?")
        out.append(Package(str(entry["name"]), str(entry["version"]), str(entry["description"]),
                           section=str(entry.get("section", "misc")),
                           files=tuple(_fixed_file(f, f"{where} ({entry['name']})")
                                       for f in entry.get("files", ()))))
    return out


FIXED_PACKAGES: tuple[Package, ...] = tuple(load_fixed_packages())


def _fixed_version(name: str) -> str:
    """The version of fixed package `name` (catalogue.json carries one of each)."""
    (version,) = {pkg.version for pkg in FIXED_PACKAGES if pkg.name == name}
    return version


def _site_packages() -> list[Package]:
    out: list[Package] = []
    for driver in DRIVERS:
        out.append(
            Package(
                "nvidia-utils-580",
                driver,
                "NVIDIA driver support binaries (lab stand-in)",
                files=(_text(NVIDIA_UTILS_VERSION_FILE, f"{driver}\n"),),
            )
        )
    for driver, version in UBUNTU_UTILS.items():
        out.append(
            Package(
                "nvidia-utils-580",
                version,
                "NVIDIA driver support binaries (lab stand-in)",
                files=(_text(NVIDIA_UTILS_VERSION_FILE, f"{driver}\n"),),
            )
        )
        # NVIDIA's kernel source at the same version: /usr/src/nvidia-<driver>, what a DKMS
        # build against the driver reads (the memory saver's build does)
        out.append(
            Package(
                KERNEL_SOURCE_PACKAGE,
                version,
                "NVIDIA kernel source package (lab stand-in)",
                section="kernel",
                files=(_text(f"/usr/src/nvidia-{driver}/Makefile", "# sparkbase-lab stand-in\n"),),
            )
        )
    out.append(
        Package(
            NCCL_SITE_PACKAGE,
            NCCL_SITE_VERSION,
            "NCCL 2.27.7 with the site's ring4 patch set p3 (lab stand-in)",
            files=(PackageFile(NCCL_SITE_PATH, NCCL_SITE_BYTES),),
            symlinks=(("/opt/nccl-site/lib/libnccl.so.2", "libnccl.so.2.27.7"),),
        )
    )
    out.append(
        Package(
            NCCL_STOCK_PACKAGE,
            NCCL_STOCK_VERSION,
            "NVIDIA Collective Communication Library runtime (lab stand-in)",
            files=(PackageFile(NCCL_STOCK_PATH, NCCL_STOCK_BYTES),),
            symlinks=(("/usr/lib/aarch64-linux-gnu/libnccl.so.2", "libnccl.so.2.28.9"),),
        )
    )
    # a DKMS module of its own name, for the lab's own tests of DKMS, signing and Secure
    # Boot on any kernel (no baseline pins it; the memory saver is BUILD_EXCLUSIVE to 64 KiB)
    generic = "/usr/src/uvm-memory-saver-0.4.2"
    out.append(
        Package(
            LAB_DKMS_PACKAGE,
            LAB_DKMS_VERSION,
            "a DKMS module for the lab's own tests (lab stand-in)",
            section="kernel",
            files=(
                _text(
                    f"{generic}/dkms.conf",
                    'PACKAGE_NAME="uvm-memory-saver"\nPACKAGE_VERSION="0.4.2"\n'
                    'BUILT_MODULE_NAME[0]="uvm_memory_saver"\n'
                    'DEST_MODULE_LOCATION[0]="/updates/dkms"\nAUTOINSTALL="yes"\n',
                ),
                _text(
                    f"{generic}/uvm_memory_saver.c",
                    "/* sparkbase-lab stand-in source */\n"
                    "static int leaf_packing = 0;\n"
                    'module_param(leaf_packing, int, 0444);\nMODULE_VERSION("0.4.2");\n',
                ),
                _text(f"{generic}/Makefile", "obj-m += uvm_memory_saver.o\n"),
            ),
        )
    )
    src = "/usr/src/dgx-spark-memory-saver-0.2.0"
    out.append(
        Package(
            MEMORY_SAVER_PACKAGE,
            MEMORY_SAVER_VERSION,
            "patched nvidia-uvm (sysmem leaf-table packing), DKMS source (lab stand-in)",
            section="kernel",
            files=tuple(_text(f"{src}/{name}", text, mode) for name, text, mode in memory_saver_checkout()),
        )
    )
    fan = f"/usr/src/{FAN_DKMS_NAME}-{FAN_DKMS_VERSION}"
    out.append(
        Package(
            FAN_PACKAGE,
            FAN_PACKAGE_VERSION,
            "DGX Spark fan-floor control: DKMS source, daemon and unit (lab stand-in)",
            section="kernel",
            files=(
                # as the fan repository's dkms.conf (d19178a0), at the fleet's version 0.1.3
                _text(
                    f"{fan}/dkms.conf",
                    f'PACKAGE_NAME="{FAN_DKMS_NAME}"\nPACKAGE_VERSION="{FAN_DKMS_VERSION}"\n'
                    'BUILT_MODULE_NAME[0]="dgx_ec_fan_control"\nBUILT_MODULE_LOCATION[0]="kernel"\n'
                    'DEST_MODULE_LOCATION[0]="/kernel/drivers/hwmon"\n'
                    'MAKE[0]="make -C kernel KDIR=${kernel_source_dir}"\n'
                    'AUTOINSTALL="yes"\nBUILD_EXCLUSIVE_ARCH="^aarch64$"\n',
                ),
                _text(f"{fan}/kernel/dgx_ec_fan_control.c",
                      "/* sparkbase-lab stand-in source */\n"
                      f'MODULE_VERSION("{FAN_DKMS_VERSION}");\n'),
                _text(f"{fan}/kernel/Makefile", "obj-m += dgx_ec_fan_control.o\n"),
                _text("/usr/local/sbin/dgx-fan-control",
                      "#!/bin/sh\necho 'dgx-fan-control (sparkbase lab stand-in)'\n", 0o755),
                # the unit as the fan repository ships it (systemd/dgx-fan-control.service, 99cca898)
                _text("/lib/systemd/system/dgx-fan-control.service",
                      "[Unit]\nDescription=DGX Spark additive fan-floor controller\n"
                      "After=systemd-modules-load.service\nWants=systemd-modules-load.service\n\n"
                      "[Service]\nType=simple\nExecStart=/usr/local/sbin/dgx-fan-control daemon\n"
                      "ExecStop=/usr/local/sbin/dgx-fan-control automatic\nRestart=on-failure\n\n"
                      "[Install]\nWantedBy=multi-user.target\n"),
            ),
        )
    )
    out.append(
        Package(
            MODESET0_PACKAGE,
            MODESET0_VERSION,
            "DRM modeset=0 override (lab stand-in of DGX OS's package)",
            files=(_text(MODESET0_FILE, "options nvidia-drm modeset=0\n"),),
        )
    )
    out.append(
        Package(
            "grub-kho-off",
            "1.0-1",
            "Adds kho=off to the kernel command line (lab stand-in)",
            files=(
                _text(
                    "/etc/default/grub.d/40-kho-off.cfg",
                    'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT kho=off"\n',
                ),
            ),
        )
    )
    return out


def _build_catalogue() -> tuple[Package, ...]:
    out: list[Package] = []
    for release, kver in KERNELS.items():
        out.extend(_kernel_packages(release, kver))
    for release, (kver, driver) in UBUNTU_KERNELS.items():
        lrm = [(f"{kver}+1", driver)]
        if KERNELS.get(release) == kver:
            out.append(_kernel_packages(release, kver, lrm)[-1])
        else:
            out.extend(_kernel_packages(release, kver, lrm))
    out.extend(_site_packages())
    out.extend(FIXED_PACKAGES)
    return tuple(out)


#: every package version the lab repository carries
CATALOGUE: tuple[Package, ...] = _build_catalogue()


def find(name: str, version: str) -> Package:
    """The catalogue entry for `name` at `version` (KeyError if absent)."""
    for pkg in CATALOGUE:
        if pkg.name == name and pkg.version == version:
            return pkg
    raise KeyError(f"{name}={version}")


def factory_packages() -> list[Package]:
    """What a factory-fresh node has installed."""
    kver = KERNELS[FACTORY_KERNEL]
    names = [
        (f"linux-image-{FACTORY_KERNEL}", kver),
        (f"linux-headers-{FACTORY_KERNEL}", kver),
        (f"linux-modules-{FACTORY_KERNEL}", kver),
        (f"linux-tools-{FACTORY_KERNEL}", kver),
        ("linux-tools-common", _fixed_version("linux-tools-common")),
        ("nvidia-nvme-options", _fixed_version("nvidia-nvme-options")),
        (f"linux-modules-nvidia-580-open-{FACTORY_KERNEL}", f"{FACTORY_DRIVER}-0ubuntu1+{kver}"),
        ("nvidia-utils-580", FACTORY_DRIVER),
        *((name, _fixed_version(name)) for name in ("gdm3", "gnome-remote-desktop", "cups")),
        (MODESET0_PACKAGE, MODESET0_VERSION),
        *((name, _fixed_version(name)) for name in FACTORY_SERVICE_PACKAGES),
    ]
    return [find(name, version) for name, version in names]


def factory_modprobe_files() -> dict[str, str]:
    """The modprobe.d files the factory packages install, by path (the factory initramfs packs them)."""
    return {f.path: f.content.decode() for pkg in factory_packages() for f in pkg.files
            if f.path.startswith("/etc/modprobe.d/") and f.path.endswith(".conf")}


def factory_modprobe_text() -> str:
    """The modprobe.d options the factory packages install (what the factory initramfs packs)."""
    return "".join(f.content.decode() for pkg in factory_packages() for f in pkg.files
                   if f.path.startswith("/etc/modprobe.d/"))


#: the services DGX OS ships enabled besides the desktop
FACTORY_SERVICE_PACKAGES = ("bluez", "snapd", "fwupd", "nv-cpu-governor", "dgx-dashboard")


def catalogue_hash() -> str:
    """Hash of everything that goes into the repository (controls, files, scripts)."""
    digest = hashlib.sha256(f"format={REPO_FORMAT}\n".encode())
    for tarball, data in sorted(source_tarballs().items()):
        digest.update(f"{tarball}\0".encode() + hashlib.sha256(data).digest())
    for pkg in CATALOGUE:
        digest.update(pkg.control().encode())
        digest.update(pkg.postinst.encode())
        for f in pkg.files:
            digest.update(f"{f.path}\0{f.mode}\0".encode())
            digest.update(hashlib.sha256(f.content).digest())
        for link, target in pkg.symlinks:
            digest.update(f"{link}\0{target}\0".encode())
    return digest.hexdigest()


def _under(root: Path, path: str, resolve: bool) -> Path:
    """`path` under `root`; with `resolve`, directories follow the machine's symlinks
    (`/lib` is `usr/lib` on merged-/usr systems: a real `lib` dir in an overlay upper dir
    would hide the machine's libraries)."""
    if resolve:
        path = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    return root / path.lstrip("/")


def _lay_files(pkg: Package, root: Path, resolve: bool = False) -> list[str]:
    """Write `pkg`'s files under `root`; return every path (dirs included) as dpkg lists."""
    paths: set[str] = set()
    for f in pkg.files:
        target = _under(root, f.path, resolve)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.content)
        target.chmod(f.mode)
        paths.add(f.path)
    for link, dest in pkg.symlinks:
        target = _under(root, link, resolve)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            target.unlink()
        target.symlink_to(dest)
        paths.add(link)
    for p in list(paths):
        parent = os.path.dirname(p)
        while parent not in ("/", ""):
            paths.add(parent)
            parent = os.path.dirname(parent)
    return sorted(paths)


def _build_deb(pkg: Package, out_dir: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="sparkbase-deb-") as tmp:
        root = Path(tmp)
        _lay_files(pkg, root)
        debian = root / "DEBIAN"
        debian.mkdir()
        (debian / "control").write_text(pkg.control())
        sums = "".join(
            f"{hashlib.md5(f.content).hexdigest()}  {f.path.lstrip('/')}\n"  # noqa: S324 (dpkg's format)
            for f in pkg.files
        )
        (debian / "md5sums").write_text(sums)
        if pkg.postinst:
            (debian / "postinst").write_text(pkg.postinst)
            (debian / "postinst").chmod(0o755)
        deb = out_dir / pkg.deb_name
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", str(root), str(deb)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return deb


def _packages_stanza(pkg: Package, deb: Path) -> str:
    data = deb.read_bytes()
    control = pkg.control().rstrip("\n").split("\n")
    desc_at = next(i for i, line in enumerate(control) if line.startswith("Description:"))
    size_kb = max(1, sum(len(f.content) for f in pkg.files) // 1024)
    fields = [
        *control[:desc_at],
        f"Installed-Size: {size_kb}",
        f"Filename: ./{deb.name}",
        f"Size: {len(data)}",
        f"MD5sum: {hashlib.md5(data).hexdigest()}",  # noqa: S324 (apt's index format)
        f"SHA256: {hashlib.sha256(data).hexdigest()}",
        *control[desc_at:],
    ]
    return "\n".join(fields) + "\n"


def build_repo(repo: Path) -> bool:
    """Build the flat apt repository in `repo`; return False when it was already current."""
    stamp = repo / "catalogue.json"
    want = catalogue_hash()
    if stamp.exists():
        try:
            if json.loads(stamp.read_text()).get("hash") == want:
                return False
        except (ValueError, OSError):
            pass
    tmp = repo.with_name(repo.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    stanzas = [_packages_stanza(pkg, _build_deb(pkg, tmp)) for pkg in CATALOGUE]
    packages = "\n".join(stanzas)
    (tmp / "Packages").write_text(packages)
    sha = hashlib.sha256(packages.encode()).hexdigest()
    (tmp / "Release").write_text(
        "Origin: sparkbase-lab\nLabel: sparkbase-lab\nSuite: lab\nCodename: lab\n"
        "Date: Thu, 01 Jan 2026 00:00:00 UTC\n"
        "Architectures: all amd64 arm64\nComponents: ./\n"
        f"SHA256:\n {sha} {len(packages.encode())} Packages\n"
    )
    sources = tmp / LAB_MIRROR_DIR
    sources.mkdir()
    for tarball, data in source_tarballs().items():
        (sources / tarball).write_bytes(data)
    (tmp / "catalogue.json").write_text(json.dumps({"format": 1, "hash": want}) + "\n")
    # The repository is bind-mounted into running nodes: swap contents in place rather than
    # replacing the directory, so a mount of `repo` keeps seeing the current files.
    repo.mkdir(parents=True, exist_ok=True)
    for old in repo.iterdir():
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old)
        else:
            old.unlink()
    for new in tmp.iterdir():
        os.replace(new, repo / new.name)
    tmp.rmdir()
    return True


def _status_stanza(pkg: Package) -> str:
    lines = pkg.control().rstrip("\n").split("\n")
    lines.insert(1, "Status: install ok installed")
    return "\n".join(lines) + "\n"


def install_offline(packages: list[Package], upper: Path, base_status: Path) -> None:
    """Install `packages` into an overlay upper dir without running dpkg.

    Files are laid under `upper`; the dpkg database in `upper` becomes `base_status` (the
    machine's, which the node sees through the lower layer) plus one stanza per package,
    with `info/<name>.list` and `.md5sums` as dpkg writes them.
    """
    info = upper / "var/lib/dpkg/info"
    info.mkdir(parents=True, exist_ok=True)
    status_path = upper / "var/lib/dpkg/status"
    status = status_path.read_text() if status_path.exists() else base_status.read_text()
    if not status.endswith("\n\n") and status:
        status = status.rstrip("\n") + "\n\n"
    for pkg in packages:
        listed = _lay_files(pkg, upper, resolve=True)
        (info / f"{pkg.name}.list").write_text("/.\n" + "".join(f"{p}\n" for p in listed))
        (info / f"{pkg.name}.md5sums").write_text(
            "".join(
                f"{hashlib.md5(f.content).hexdigest()}  {f.path.lstrip('/')}\n"  # noqa: S324
                for f in pkg.files
            )
        )
        status += _status_stanza(pkg) + "\n"
    status_path.write_text(status)
