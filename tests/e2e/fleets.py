"""Fleets for the e2e modules: a lab plus a private site copy, made fresh or cloned.

- `fleet_for_module(tmp_path_factory, name, port_base)`: a factory-fresh four-node lab on
  the module's own ports with a private copy of the shipped site (its override log and
  local locks stay in the module); brought down after.
- `ConvergedImage` / `converge_image`: four nodes converged ONCE by a real
  `sparkbase apply --allow-reboot --yes --json` from the factory state, then brought down
  (the e2e conftest's session fixture `converged_image` makes one per run).
- `variant_image`: two nodes, spark1 as the factory left it and spark2 (`VARIANT_NODE`)
  converged ONCE to the variant by a real `apply --limit spark2 --baseline ds41f-7x-64k
  --allow-reboot --override-policy ...` (a person at its console enrols the MOK), then
  brought down (the session fixture `variant_image`): the modules that read a factory node
  and a node on the variant clone it instead of each converging its own.
- `clone_fleet(image, directory, port_base, nodes)`: an independent copy of the image's node
  disks (`Lab.clone`), booted on the module's own ports, for modules that start from a
  converged fleet; brought down after. Booting the copy is a reboot of a converged node.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkbase_lab.fleet import Lab

REPO = Path(__file__).resolve().parents[2]
NODES = ["spark1", "spark2", "spark3", "spark4"]
SITE_KERNEL = "6.17.0-1032-nvidia"
FACTORY_KERNEL = "6.17.0-1008-nvidia"
VARIANT_KERNEL = "7.0.0-1019-nvidia-64k"
VARIANT = "ds41f-7x-64k"
#: the variant image's node on the variant (spark1 beside it stays as the factory left it)
VARIANT_NODE = "spark2"
#: the override reason the variant image's apply records (the variant breaks the site contract)
VARIANT_REASON = "e2e: the variant image"
#: the parts of the repository that make up the shipped site
SITE_PARTS = ("baselines", "inventory", "lanes")

#: a `sha256sum` wrapper for a node: the upload check (`sha256sum -c`) marks that it runs,
#: then waits, so a test can act deterministically while an upload is half done
SLOW_CHECK = """#!/bin/sh
if [ "$1" = "-c" ]; then : > /run/sparkbase-test-slow-check; sleep {seconds}; fi
exec /usr/bin/sha256sum "$@"
"""
SLOW_CHECK_PATH = "/usr/local/sbin/sha256sum"
SLOW_CHECK_MARK = "/run/sparkbase-test-slow-check"


class Fleet:
    """A lab plus a private copy of the shipped site (override log and locks land there)."""

    def __init__(self, lab: Lab, site: Path) -> None:
        self.lab = lab
        self.site = site

    def argv(self, *args: str, site: Path | None = None) -> list[str]:
        """The sparkbase command line for `args` against this fleet."""
        return [sys.executable, "-m", "sparkbase.cli.main", args[0], "--site", str(site or self.site),
                "--lab-dir", str(self.lab.dir), *args[1:]]

    def sparkbase(self, *args: str, site: Path | None = None,
                  timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """Run the sparkbase CLI against this fleet (a separate process: pyinfra patches the
        interpreter with gevent and caches host keys)."""
        return subprocess.run(self.argv(*args, site=site), capture_output=True, text=True,
                              timeout=timeout, check=False)

    def popen(self, *args: str, site: Path | None = None) -> subprocess.Popen[str]:
        """Start the sparkbase CLI against this fleet (stdout and stderr piped)."""
        return subprocess.Popen(self.argv(*args, site=site), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def sh(self, node: str, command: str, input: str | None = None) -> str:
        """Run a shell command on a node; fail the test if it fails."""
        status, out, err = self.lab.run(node, command, input=input)
        assert status == 0, f"{node}: {command}: {err}"
        return out

    def apply(self, node: str, *extra: str) -> dict[str, dict[str, Any]]:
        """`apply --limit NODE --yes --json` (reboots staged, not done): operations by name."""
        done = self.sparkbase("apply", "--limit", node, "--yes", "--json", *extra)
        report = json.loads(done.stdout)
        result = report["nodes"][0]
        assert result["status"] in ("changed", "reboot pending", "unchanged", "MOK enrolment pending"), \
            done.stdout + done.stderr
        return {op["name"]: op for op in result["operations"]}

    def console(self, node: str) -> None:
        """A person at `node`'s console at its next boot, who enrols the pending MOK keys."""
        console_enrol(self.lab, node)

    def wait_ssh(self, node: str, timeout: float = 30) -> None:
        """Wait until `node` answers over SSH again (after a fault is cleared)."""
        deadline = time.monotonic() + timeout
        while self.lab.run(node, "true", timeout=10)[0] != 0:
            if time.monotonic() > deadline:
                pytest.fail(f"{node} did not answer over SSH within {timeout:.0f}s")
            time.sleep(0.2)

    def slow_upload_check(self, node: str, seconds: float) -> None:
        """Make `node`'s upload check (`sha256sum -c`) mark itself and wait `seconds`."""
        self.sh(node, f"cat > {SLOW_CHECK_PATH} && chmod 755 {SLOW_CHECK_PATH} && rm -f {SLOW_CHECK_MARK}",
                input=SLOW_CHECK.format(seconds=seconds))

    def normal_upload_check(self, node: str) -> None:
        """Undo `slow_upload_check`."""
        self.sh(node, f"rm -f {SLOW_CHECK_PATH} {SLOW_CHECK_MARK}")

    def wait_upload_check(self, node: str, proc: subprocess.Popen[str], timeout: float = 120) -> None:
        """Wait until `node`'s slowed upload check runs (fail if `proc` ends first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.lab.run(node, f"test -e {SLOW_CHECK_MARK}")[0] == 0:
                return
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"the apply ended before its upload check ran on {node}:\n{out}\n{err}")
            time.sleep(0.1)
        pytest.fail(f"no upload check ran on {node} within {timeout:.0f}s")


def console_enrol(lab: Lab, node: str) -> None:
    """`sparkbase lab console NODE enroll-mok`: at `node`'s next boot a person at its console
    enrols the pending MOK keys in MokManager (without one, the keys stay pending)."""
    argv = [sys.executable, "-m", "sparkbase.cli.main", "lab", "--dir", str(lab.dir), "console", node,
            "enroll-mok"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def copy_site(where: Path) -> Path:
    """A private copy of the shipped site at `where` (its own local locks and override log)."""
    for part in SITE_PARTS:
        shutil.copytree(REPO / part, where / part)
    return where


def require_root() -> None:
    """The e2e tier needs root: fail (never skip) without it."""
    if os.geteuid() != 0:
        pytest.fail("end-to-end tests need root (namespaces, mounts); run them as root")


def fleet_for_module(tmp_path_factory: pytest.TempPathFactory, name: str, port_base: int) -> Iterator[Fleet]:
    """A factory-fresh four-node lab on `port_base`, with a site copy; brought down after."""
    require_root()
    os.environ.setdefault("SPARKBASE_LAB_BOOT_DELAY", "0.3")
    base = tmp_path_factory.mktemp(name)
    site = copy_site(base / "site")
    lab = Lab(base / "lab", port_base=port_base)
    lab.up(4, fresh=True)
    try:
        yield Fleet(lab, site)
    finally:
        lab.down()


def as_found_fleet(tmp_path_factory: pytest.TempPathFactory, name: str, port_base: int) -> Iterator[Fleet]:
    """Four nodes as the site's fleet is found (`sparkbase lab up --as-found`: set up by hand,
    the production lane in its container; sparkbase_lab.as_found) on `port_base`, with a
    private copy of the shipped site; brought down after."""
    from sparkbase.model.site import load_site
    from sparkbase_lab import as_found

    require_root()
    os.environ.setdefault("SPARKBASE_LAB_BOOT_DELAY", "0.3")
    base = tmp_path_factory.mktemp(name)
    site = copy_site(base / "site")
    lab = Lab(base / "lab", port_base=port_base)
    as_found.up(lab, load_site(site), fresh=True)
    try:
        yield Fleet(lab, site)
    finally:
        lab.down()


def one_node_lab(tmp_path_factory: pytest.TempPathFactory, name: str, port_base: int) -> Iterator[Lab]:
    """A factory-fresh one-node lab on `port_base` (no site); brought down after."""
    require_root()
    os.environ.setdefault("SPARKBASE_LAB_BOOT_DELAY", "0.3")
    lab = Lab(tmp_path_factory.mktemp(name), port_base=port_base)
    lab.up(1, fresh=True)
    try:
        yield lab
    finally:
        lab.down()


@dataclass(frozen=True)
class ConvergedImage:
    """A down lab whose nodes were converged by a real `apply` (`converge_image`: four nodes to
    the shipped site; `variant_image`: spark2 to the variant): clone it, never start it."""

    lab: Lab
    site: Path
    """The site copy the converge ran with (its local state included)."""
    report: dict[str, Any]
    """The converge's `apply --json` report (one entry per node)."""


def converge_image(directory: Path, port_base: int) -> ConvergedImage:
    """Converge a factory-fresh four-node lab in `directory` with `apply`, then bring it down.

    Raises RuntimeError (with apply's output) when the apply fails.
    """
    require_root()
    os.environ.setdefault("SPARKBASE_LAB_BOOT_DELAY", "0.3")
    fleet = Fleet(Lab(directory / "lab", port_base=port_base), copy_site(directory / "site"))
    fleet.lab.up(4, fresh=True)
    try:
        done = fleet.sparkbase("apply", "--allow-reboot", "--yes", "--json")
    finally:
        fleet.lab.down()
    if done.returncode != 0:
        raise RuntimeError(f"apply did not converge the image fleet:\n{done.stdout}\n{done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout)
    return ConvergedImage(fleet.lab, fleet.site, report)


def variant_image(directory: Path, port_base: int) -> ConvergedImage:
    """Two factory-fresh nodes in `directory`; spark2 converged to the variant by `apply`
    (reboot included, its MOK enrolled by a person at the console), spark1 left as the
    factory made it; then brought down. The report is the apply's (`--json`).

    Raises RuntimeError (with apply's output) when the apply fails or spark2 does not run
    the variant's kernel after it.
    """
    require_root()
    os.environ.setdefault("SPARKBASE_LAB_BOOT_DELAY", "0.3")
    fleet = Fleet(Lab(directory / "lab", port_base=port_base), copy_site(directory / "site"))
    fleet.lab.up(2, fresh=True)
    try:
        fleet.console(VARIANT_NODE)
        done = fleet.sparkbase("apply", "--limit", VARIANT_NODE, "--baseline", VARIANT, "--allow-reboot",
                               "--yes", "--override-policy", VARIANT_REASON, "--json")
        running = fleet.lab.run(VARIANT_NODE, "uname -r")[1].strip()
    finally:
        fleet.lab.down()
    if done.returncode != 0 or running != VARIANT_KERNEL:
        raise RuntimeError(f"apply did not move {VARIANT_NODE} of the variant image to {VARIANT} "
                           f"(running {running!r}):\n{done.stdout}\n{done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout)
    return ConvergedImage(fleet.lab, fleet.site, report)


def image_fleet(image: ConvergedImage, directory: Path, port_base: int, nodes: int = 4) -> Iterator[Fleet]:
    """`clone_fleet` with a copy of the image's site (its local state and override log
    included) beside it, as one `Fleet`; brought down after."""
    site = directory / "site"
    shutil.copytree(image.site, site)
    for lab in clone_fleet(image, directory / "lab", port_base, nodes):
        yield Fleet(lab, site)


def clone_fleet(image: ConvergedImage, directory: Path, port_base: int, nodes: int = 4) -> Iterator[Lab]:
    """An independent copy of the image's first `nodes` nodes in `directory`, up on
    `port_base`; brought down after."""
    require_root()
    os.environ.setdefault("SPARKBASE_LAB_BOOT_DELAY", "0.3")
    lab = image.lab.clone(directory, port_base=port_base, nodes=nodes)
    lab.up(nodes)
    try:
        yield lab
    finally:
        lab.down()


def until_a_verdict(run: Callable[[], tuple[int, dict[str, Any]]]) -> tuple[int, dict[str, Any]]:
    """`run` (one `qualify --json`: its exit code and report), up to twice more while the
    interval calls the candidate unstable: the lab's millisecond timings share two loaded cores
    with the rest of the suite. The note goes to stderr: stdout is the JSON the next attempt is
    read from."""
    code, result = run()
    for attempt in (2, 3):
        if result["verdict"] != "unstable":
            break
        print(f"attempt {attempt - 1} unstable ({result['reasons']}); qualifying again", file=sys.stderr)
        code, result = run()
    return code, result
