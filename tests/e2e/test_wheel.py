"""The wheels, as a pip/pipx user gets them: built from this tree, installed in a fresh venv, then
`init`, `validate`, `lab up`, `apply`, `audit` and the pytest plugin run from that venv only.
The product wheel (`sparkbase`) holds no lab code; the emulated fleet is its own wheel
(`sparkbase-lab`, from lab/), installed beside it where the lab is used.

The fresh venv has no pip and no dependencies of its own: a .pth file adds the development
venv's site-packages for them (no network at test time), and sparkbase itself comes from
the wheel (asserted: not from this tree). Building the wheel needs setuptools>=68 from the
package registry (pip's build isolation), as CI has.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from ports import port_base

from sparkbase.cli.main import LAB_NOT_INSTALLED

pytestmark = pytest.mark.end_to_end

REPO = Path(__file__).resolve().parents[2]
PORT_BASE = port_base("SPARKBASE_TEST_WHEEL_PORT_BASE", 2961)
#: what the build reads from the tree
BUILD_INPUTS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "src", "baselines",
                "inventory", "lanes")
#: files the wheel must carry beyond the Python modules (the starter site's)
MUST_CARRY = (
    "sparkbase/py.typed",
    "sparkbase/render/templates/grub.cfg.j2",
    "sparkbase/qualify/prompts/v1.yaml",  # the shipped prompt set (qualify)
    "sparkbase/checks_plugin/checks.py",
    "sparkbase/starter/site/baselines/site.yaml",
    "sparkbase/starter/site/inventory/site.yaml",
    "sparkbase/starter/site/lanes/glm-fp8.yaml",
)
#: what the lab's wheel must carry: its modules and the node shims' package data
LAB_MUST_CARRY = (
    "sparkbase_lab/fleet.py",
    "sparkbase_lab/cli.py",  # the `sparkbase lab` command
    "sparkbase_lab/shims/shim.py",
    "sparkbase_lab/shims/client.c",  # the node commands' C client, built at `lab up`
    "sparkbase_lab/preload.py",  # the preload library's C source
    "sparkbase_lab/boot.py",
    "sparkbase_lab/catalogue.json",  # the fixed stand-in packages (packages.py reads it)
    "sparkbase_lab/py.typed",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("tree")
    for name in BUILD_INPUTS:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tree / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "site"))
        else:
            shutil.copy2(source, tree / name)
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(tree), "-w", str(dist)],
                   check=True, timeout=600)
    (built,) = dist.glob("sparkbase-*.whl")
    return built


@pytest.fixture(scope="module")
def lab_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The emulated fleet's own wheel, built from lab/ alone."""
    tree = tmp_path_factory.mktemp("lab-tree") / "lab"
    shutil.copytree(REPO / "lab", tree, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    dist = tmp_path_factory.mktemp("lab-dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(tree), "-w", str(dist)],
                   check=True, timeout=600)
    (built,) = dist.glob("sparkbase_lab-*.whl")
    return built


def wheel_venv(root: Path, wheels: list[Path], extra_files: dict[str, str] | None = None) -> Path:
    """A fresh venv at `root` with the wheels installed; their dependencies from the development
    venv (a .pth file: its site-packages only, not the editable installs of this tree), plus
    `extra_files` in its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    purelib = Path(subprocess.run(
        [str(root / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    for name, text in (extra_files or {}).items():
        (purelib / name).write_text(text)
    (purelib / "_sparkbase_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install",
                    "-q", "--no-deps", "--no-index", *map(str, wheels)], check=True, timeout=300)
    return root


@pytest.fixture(scope="module")
def venv(wheel: Path, lab_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An operator's install: the product and the lab beside it."""
    return wheel_venv(tmp_path_factory.mktemp("venv"), [wheel, lab_wheel])


#: a stand-in for an environment installed without the `checks` extra: these cannot be imported
NO_CHECKS_FINDER = """import importlib.abc, sys

class _WithoutChecks(importlib.abc.MetaPathFinder):
    blocked = ("pytest", "_pytest", "testinfra", "xdist", "pluggy")

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (installed without [checks])", name=name)
        return None

sys.meta_path.insert(0, _WithoutChecks())
"""


@pytest.fixture(scope="module")
def venv_without_checks(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel in a venv where pytest and testinfra cannot be imported (`pip install sparkbase`
    without `[checks]`): the dependencies from the development venv, those blocked. A site's
    install: no lab either."""
    blocker = {"_sparkbase_no_checks.py": NO_CHECKS_FINDER,
               "_sparkbase_no_checks.pth": "import _sparkbase_no_checks\n"}
    return wheel_venv(tmp_path_factory.mktemp("venv-no-checks"), [wheel], blocker)


def run(
    venv: Path, *argv: str, cwd: Path | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / argv[0]), *argv[1:]], capture_output=True, text=True,
                          cwd=cwd, check=False, timeout=timeout)


def test_the_wheel_carries_what_init_needs_and_no_lab(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [name for name in MUST_CARRY if name not in names]
    assert not missing, missing
    assert [name for name in names if name.startswith("sparkbase/lab/") or "sparkbase_lab" in name] == []
    assert not any(name.endswith("sparkbase.lock") or "/.sparkbase/" in name for name in names)
    entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[pytest11]" in text and "sparkbase.checks_plugin = sparkbase.checks_plugin" in text
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    requires: dict[str, list[str]] = {}  # package -> the extras requiring it ("" for always)
    for line in metadata.decode().splitlines():
        found = re.match(r'Requires-Dist: ([A-Za-z0-9._-]+)[^;]*(?:; extra == "(\w+)")?', line)
        if found:
            requires.setdefault(found[1], []).append(found[2] or "")
    assert requires["pytest"] == ["checks"] and requires["pytest-testinfra"] == ["checks"]
    for package in ("prometheus-client", "filelock", "rich", "gevent", "invoke", "paramiko", "pyinfra"):
        assert requires[package] == [""], package


def test_the_lab_wheel_carries_the_lab_and_needs_this_sparkbase(wheel: Path, lab_wheel: Path) -> None:
    names = set(zipfile.ZipFile(lab_wheel).namelist())
    missing = [name for name in LAB_MUST_CARRY if name not in names]
    assert not missing, missing
    assert not any(name.startswith("sparkbase/") for name in names)
    metadata = zipfile.ZipFile(lab_wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    version = wheel.name.split("-")[1]
    assert f"Requires-Dist: sparkbase=={version}" in metadata.decode().splitlines()


@pytest.fixture(scope="module")
def lab_dir(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("wheel-lab")
    up = run(venv, "sparkbase", "lab", "--dir", str(directory), "up", "--port-base", str(PORT_BASE),
             "--fresh")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield directory
    finally:
        run(venv, "sparkbase", "lab", "--dir", str(directory), "down", "--purge")


def test_a_new_user_starts_a_site_from_the_wheel(venv: Path, lab_dir: Path, tmp_path: Path) -> None:
    where = run(venv, "python", "-c", "import sparkbase, sparkbase_lab; print(sparkbase.__file__); "
                "print(sparkbase_lab.__file__)")
    assert where.returncode == 0, where.stderr
    # both from the venv, not this tree
    assert all(line.startswith(str(venv)) for line in where.stdout.splitlines()), where.stdout
    lab_help = run(venv, "sparkbase", "lab", "--help")
    assert lab_help.returncode == 0 and "fault" in lab_help.stdout, lab_help.stdout + lab_help.stderr
    site = tmp_path / "site"
    steps = [
        (("sparkbase", "init", str(site)), 0),
        (("sparkbase", "validate", "--site", str(site)), 0),
        (("sparkbase", "apply", "--site", str(site), "--lab-dir", str(lab_dir), "--allow-reboot",
          "--yes"), 0),
        (("sparkbase", "audit", "--site", str(site), "--lab-dir", str(lab_dir)), 0),
    ]
    for argv, status in steps:
        result = run(venv, *argv)
        assert result.returncode == status, (argv, result.stdout, result.stderr)
    plugin = run(venv, "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--sparkbase-site",
                 str(site), "--hosts=paramiko://spark1,paramiko://spark2",
                 f"--ssh-config={lab_dir / 'ssh_config'}", "-k", "kernel.page_size or fleet.kernel", "-rA",
                 cwd=site)
    assert plugin.returncode == 0, plugin.stdout + plugin.stderr
    assert "PASSED sparkbase-checks::test_check[kernel.page_size-paramiko://spark1]" in plugin.stdout
    assert "PASSED sparkbase-checks::test_fleet_check[fleet.kernel]" in plugin.stdout


def test_the_cli_runs_without_the_checks_extra(
    venv_without_checks: Path, lab_dir: Path, tmp_path: Path
) -> None:
    """`--help`, `init`, `validate`, `audit` (with every output format) need neither pytest nor
    testinfra; only the pytest plugin does. Nor the lab: `--lab-dir` reads the lab's SSH files,
    and `sparkbase lab ACTION` says how to install it."""
    blocked = run(venv_without_checks, "python", "-c", "import pytest")
    assert blocked.returncode != 0 and "installed without [checks]" in blocked.stderr
    no_lab = run(venv_without_checks, "python", "-c", "import sparkbase_lab")
    assert no_lab.returncode != 0 and "No module named 'sparkbase_lab'" in no_lab.stderr
    lab_status = run(venv_without_checks, "sparkbase", "lab", "--dir", str(lab_dir), "status")
    assert lab_status.returncode == 2, lab_status.stdout + lab_status.stderr
    assert lab_status.stderr.strip() == LAB_NOT_INSTALLED
    site = tmp_path / "site"
    for argv in (("sparkbase", "--help"), ("sparkbase", "init", str(site)),
                 ("sparkbase", "validate", "--site", str(site))):
        result = run(venv_without_checks, *argv)
        assert result.returncode == 0, (argv, result.stdout, result.stderr)
    for fmt in ("table", "json", "prometheus"):
        audit = run(venv_without_checks, "sparkbase", "audit", "--site", str(site), "--lab-dir", str(lab_dir),
                    "--format", fmt)
        # the lab may or may not be converged yet (test order): drift is 1, never a crash
        assert audit.returncode in (0, 1), (fmt, audit.stdout, audit.stderr)
        assert "Traceback" not in audit.stderr and "internal error" not in audit.stderr, audit.stderr
    assert "sparkbase_node_reachable" in audit.stdout
