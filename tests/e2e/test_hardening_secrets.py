"""Hardening, end to end: the MOK private key never leaks; every file sparkbase writes has
the right owner and mode.

One factory-fresh lab (port base 2821) for the module. Every sparkbase run here goes
through `run_logged`: umask 000 (the worst an operator can have) and Python logging at
DEBUG, so pyinfra's own debug output is captured too. The MOK key is the pair the lab made
in its directory (`<lab dir>/mok`), whose content the test knows; the grep looks for every
base64 line of its body. Its path is not a secret and may appear.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleets import NODES, SLOW_CHECK_PATH, VARIANT_KERNEL, Fleet, fleet_for_module
from ports import port_base

from sparkbase.deploy.assign import with_assignment
from sparkbase.model.site import load_site
from sparkbase.render import node_files

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_HARDENING_SECRETS_PORT_BASE", 2821)
KEY_PATH = "/var/lib/shim-signed/mok/MOK.priv"
VARIANT = "ds41f-7x-64k"
OVERRIDE = ("--override-policy", "e2e: hardening secrets")

#: spark3's `sha256sum`: the upload check of the key fails, every other call is the real one
FAILING_KEY_CHECK = """#!/bin/sh
if [ "$1" = "-c" ]; then
  line=$(cat)
  case "$line" in *MOK.priv*) exit 1;; esac
  printf '%s\\n' "$line" | /usr/bin/sha256sum "$@"
  exit $?
fi
exec /usr/bin/sha256sum "$@"
"""

RUN_LOGGED = """
import logging, os, sys
os.umask(0)
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
from sparkbase.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def secret_lines(fleet: Fleet) -> list[str]:
    """The distinctive lines of the MOK private key (its base64 body)."""
    lines = [line.strip() for line in (fleet.lab.mok_dir / "MOK.priv").read_text().splitlines()]
    body = [line for line in lines if line and not line.startswith("-----")]
    assert len(body) > 10
    return body


class Outputs:
    """Everything the runs printed and wrote, for the grep."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def add(self, name: str, text: str) -> None:
        self.texts[name] = text


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    yield from fleet_for_module(tmp_path_factory, "hardening-secrets", PORT_BASE)


OFFLINE = ("validate", "render")


def run_logged(fleet: Fleet, outputs: Outputs, *args: str) -> subprocess.CompletedProcess[str]:
    """One sparkbase run under umask 000 with DEBUG logging; its output kept for the grep."""
    lab = [] if args[0] in OFFLINE else ["--lab-dir", str(fleet.lab.dir)]
    argv = [sys.executable, "-c", RUN_LOGGED, args[0], "--site", str(fleet.site), *lab, *args[1:]]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    name = " ".join(args)
    outputs.add(f"{name} (stdout)", done.stdout)
    outputs.add(f"{name} (stderr)", done.stderr)
    return done


@pytest.fixture(scope="module")
def runs(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Outputs:
    """validate, render, plan, apply (variant on spark2, with a failed key upload on spark3
    first), audit in every format, preflight: all outputs."""
    outputs = Outputs()
    out_dir = tmp_path_factory.mktemp("rendered")
    assert run_logged(fleet, outputs, "validate").returncode == 0
    assert run_logged(fleet, outputs, "render", "--out", str(out_dir)).returncode == 0
    move = ("--limit", "spark2", "--baseline", VARIANT)
    assert run_logged(fleet, outputs, "plan", *move).returncode == 1
    assert run_logged(fleet, outputs, "plan", *move, "--json").returncode == 1
    # a key upload that fails: spark3's upload check fails for the key (the key is uploaded;
    # a temp path can no longer be blocked by planting something there)
    fleet.sh("spark3", f"cat > {SLOW_CHECK_PATH} && chmod 755 {SLOW_CHECK_PATH}", input=FAILING_KEY_CHECK)
    failed = run_logged(fleet, outputs, "apply", "--limit", "spark3", "--baseline", VARIANT, *OVERRIDE,
                        "--yes")
    fleet.sh("spark3", f"rm -f {SLOW_CHECK_PATH}")
    assert failed.returncode == 1, failed.stdout + failed.stderr[-3000:]
    assert "spark3" in failed.stdout and "failed" in failed.stdout
    assert "MOK.priv" in failed.stdout, failed.stdout
    fleet.console("spark2")  # a person at the console enrols the MOK at the apply's reboot
    done = run_logged(fleet, outputs, "apply", *move, *OVERRIDE, "--allow-reboot", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    again = run_logged(fleet, outputs, "apply", *move, *OVERRIDE, "--yes")
    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    for fmt in ("table", "json", "junit", "prometheus"):
        assert run_logged(fleet, outputs, "audit", "--format", fmt).returncode == 1
    assert run_logged(fleet, outputs, "preflight", "ds41f-ring4").returncode == 1
    forced = run_logged(fleet, outputs, "preflight", "dsv41-flash", "--override", "e2e: hardening")
    assert forced.returncode == 0, forced.stdout
    for path in sorted(fleet.site.rglob("*")) + sorted(out_dir.rglob("*")):
        if path.is_file():
            outputs.add(str(path), path.read_text(errors="replace"))
    outputs.add("out_dir", str(out_dir))
    return outputs


def test_the_mok_private_key_never_appears_in_any_output_or_file(fleet: Fleet, runs: Outputs) -> None:
    assert fleet.sh("spark2", "uname -r").strip() == VARIANT_KERNEL  # the key was really used
    local = hashlib.sha256((fleet.lab.mok_dir / "MOK.priv").read_bytes()).hexdigest()
    assert fleet.sh("spark2", f"sha256sum {KEY_PATH}").split()[0] == local  # and it was uploaded
    body = secret_lines(fleet)
    assert len(runs.texts) > 30
    assert any("DEBUG" in text for text in runs.texts.values())  # pyinfra's debug was captured
    leaks = [(name, line[:12]) for name, text in runs.texts.items() for line in body if line in text]
    assert leaks == []
    for name, text in runs.texts.items():
        assert "PRIVATE KEY-----" not in text, name


def test_every_file_sparkbase_writes_locally_has_a_safe_mode(fleet: Fleet, runs: Outputs) -> None:
    out_dir = Path(runs.texts["out_dir"])
    written = [p for p in [*fleet.site.joinpath(".sparkbase").rglob("*"), *out_dir.rglob("*")]]
    assert any(p.name == "overrides.log" for p in written)
    assert any(p.suffix == ".lock" for p in written)
    assert sum(1 for p in written if p.is_file() and out_dir in p.parents) >= 4 * 7
    for path in written:
        info = path.stat()
        assert info.st_uid == os.geteuid(), path
        assert not info.st_mode & stat.S_IWOTH, f"{path} is world-writable ({stat.filemode(info.st_mode)})"
        assert not info.st_mode & stat.S_IWGRP, f"{path} is group-writable ({stat.filemode(info.st_mode)})"
    log = fleet.site / ".sparkbase" / "overrides.log"
    assert stat.S_IMODE(log.stat().st_mode) in (0o640, 0o600, 0o644)
    assert [json.loads(line)["reason"] for line in log.read_text().splitlines()]


def test_every_file_sparkbase_writes_on_a_node_has_its_owner_and_mode(fleet: Fleet, runs: Outputs) -> None:
    site = with_assignment(load_site(fleet.site), ["spark2"], VARIANT)
    files = node_files(site, "spark2")
    assert len(files) >= 7
    for file in files:
        owner, mode = fleet.sh("spark2", f"stat -c '%U:%G %a' {file.path}").split()
        assert owner == "root:root" and int(mode, 8) == file.mode, file.path
    key = fleet.sh("spark2", f"stat -c '%U:%G %a' {KEY_PATH} {Path(KEY_PATH).parent} "
                             "/var/lib/shim-signed/mok/MOK.der").split("\n")
    assert key[:3] == ["root:root 600", "root:root 700", "root:root 644"]
    # nothing sparkbase manages is world-writable, and no upload was left behind
    managed = " ".join(["/etc/nccl.conf", "/etc/sysctl.d", "/etc/modprobe.d", "/etc/default/grub.d",
                        "/etc/netplan", "/etc/systemd/system", "/etc/sparkbase", "/var/lib/shim-signed"])
    for node in NODES:
        loose = fleet.sh(node, f"find {managed} -perm -o+w ! -type l 2>/dev/null || true").strip()
        assert loose == "", (node, loose)
        left = fleet.sh(node, f"find {managed} -name '*.sparkbase-new*' 2>/dev/null || true").strip()
        assert left == "" or node == "spark3", (node, left)


def test_a_wrong_path_never_echoes_the_key(fleet: Fleet, tmp_path: Path) -> None:
    """The private key named where sparkbase expects metrics, an ssh_config or the override
    log: each is refused with a located one-line error that prints none of the key, and the
    key file behind a planted log link is not written."""
    import shutil

    key = tmp_path / "MOK.priv"
    shutil.copyfile(fleet.lab.mok_dir / "MOK.priv", key)
    body = secret_lines(fleet)
    said: dict[str, str] = {}
    metrics = fleet.sparkbase("triggers", "--metrics", str(key))
    assert metrics.returncode == 2 and f"{key}:1: not Prometheus text" in metrics.stderr, metrics.stderr
    said["triggers --metrics"] = metrics.stdout + metrics.stderr
    site = tmp_path / "site"
    shutil.copytree(fleet.site, site)
    inventory = site / "inventory" / "site.yaml"
    text = inventory.read_text()
    assert "  config: inventory/ssh_config" in text
    inventory.write_text(text.replace("  config: inventory/ssh_config", f"  config: {key}"))
    (site / "inventory" / "known_hosts").write_text("")
    audit = subprocess.run([sys.executable, "-m", "sparkbase.cli.main", "audit", "--site", str(site)],
                           capture_output=True, text=True, timeout=120, check=False)
    assert audit.returncode == 2 and "not an OpenSSH client config (line 1)" in audit.stderr, audit.stderr
    said["audit with ssh.config: MOK.priv"] = audit.stdout + audit.stderr
    checks = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(Path(__file__).parents[2] / "checks"), "--hosts=ssh://spark1", f"--ssh-config={key}",
         f"--sparkbase-site={fleet.site}"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert checks.returncode == 4 and "not an OpenSSH client config" in checks.stderr, checks.stderr
    said["pytest checks --ssh-config MOK.priv"] = checks.stdout + checks.stderr
    before = key.read_bytes()
    link = tmp_path / "logdir" / "overrides.log"
    link.parent.mkdir()
    link.symlink_to(key)
    gate = fleet.sparkbase("preflight", "dsv41-flash", "--override", "e2e: link", "--log", str(link))
    assert gate.returncode == 1 and "the override could not be recorded" in gate.stderr, gate.stderr
    assert key.read_bytes() == before
    said["preflight --log link to MOK.priv"] = gate.stdout + gate.stderr
    leaks = [(name, line[:12]) for name, text in said.items() for line in body if line in text]
    assert leaks == []
