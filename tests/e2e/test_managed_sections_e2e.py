"""`managed:` on a real node: this module's own one-node lab (port 3331), spark1 cloned from the
run's converged image. Someone edits what sparkbase wrote (a comment in /etc/nccl.conf) and a
live sysctl. With `managed: []` plan and apply do nothing at all and the audit judges only
effective values; with `managed: [memory]` only memory steps (and sparkbase's stamp) change,
and the edited /etc/nccl.conf is left as it is."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleets import ConvergedImage, clone_fleet
from ports import port_base

from sparkbase.cli.main import main
from sparkbase.model.sections import SECTIONS
from sparkbase_lab.fleet import Lab

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_MANAGED_PORT_BASE", 3331)
NODE = "spark1"
BASELINE = "site-stock-6.17-4k"
#: a line an operator adds to sparkbase's /etc/nccl.conf (NCCL's settings stay the same)
COMMENT = "# tuned by hand, see the runbook"
SYSCTL = "vm.min_free_kbytes"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, converged_image: ConvergedImage) -> Iterator[Lab]:
    """spark1 converged to the shipped site, then edited by hand: a comment in /etc/nccl.conf."""
    for lab in clone_fleet(converged_image, tmp_path_factory.mktemp("managed-lab"), PORT_BASE, nodes=1):
        status, _, err = lab.run(NODE, f"echo '{COMMENT}' >> /etc/nccl.conf")
        assert status == 0, err
        yield lab


def site_managing(site_copy: Path, where: Path, sections: list[str]) -> Path:
    """A copy of the site whose node baseline says `managed: [sections]`."""
    site = where / "site"
    shutil.copytree(site_copy, site)
    file = site / "baselines" / f"{BASELINE}.yaml"
    text = re.sub(r"^(version: .*\n)", rf"\1managed: [{', '.join(sections)}]\n", file.read_text(),
                  count=1, flags=re.M)
    file.write_text(text)
    return site


def sparkbase(lab: Lab, site: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """plan/apply in a separate process (pyinfra patches the interpreter with gevent)."""
    return subprocess.run([sys.executable, "-m", "sparkbase.cli.main", *argv, "--site", str(site),
                           "--lab-dir", str(lab.dir), "--limit", NODE], capture_output=True, text=True,
                          check=False, timeout=900)


def report(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one node of a plan/apply `--json` report."""
    node: dict[str, Any] = json.loads(done.stdout)["nodes"][0]
    return node


def audit(lab: Lab, site: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, str]]:
    code = main(["audit", "--site", str(site), "--lab-dir", str(lab.dir), "--limit", NODE,
                 "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    return code, {c["id"]: c["status"] for n in data["nodes"] for c in n["checks"]}


def test_a_baseline_that_manages_nothing_changes_nothing_and_audits_clean(
    node: Lab, site_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the shipped baseline manages everything: the edit is drift, and plan would rewrite it
    code, checks = audit(node, site_copy, capsys)
    assert (code, checks["nccl.conf"]) == (1, "fail")
    done = sparkbase(node, site_copy, "plan", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    assert any(op["name"].startswith("/etc/nccl.conf") for op in report(done)["operations"]
               if op["status"] == "would change")

    site = site_managing(site_copy, tmp_path, [])
    done = sparkbase(node, site, "plan", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    planned = report(done)
    assert (planned["status"], planned["operations"], planned["reboot_required"]) == ("unchanged", [], False)
    assert planned["unmanaged"] == list(SECTIONS)
    text = sparkbase(node, site, "plan")
    assert "as found, not managed: " + ", ".join(SECTIONS) in text.stdout

    done = sparkbase(node, site, "apply", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (report(done)["status"], report(done)["operations"]) == ("unchanged", [])
    assert COMMENT in node.run(NODE, "cat /etc/nccl.conf")[1]

    code, checks = audit(node, site, capsys)
    assert [check for check, status in checks.items() if status == "fail"] == []
    assert code == 0
    assert checks["nccl.conf"] == checks["stamp"] == checks["fabric.netplan"] == "skip"
    assert checks["kernel.release"] == checks["nccl.library"] == checks[f"sysctl.{SYSCTL}"] == "pass"


def test_a_baseline_that_manages_memory_changes_only_memory(
    node: Lab, site_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = node.run(NODE, f"sysctl -n {SYSCTL}")
    assert status == 0, err
    wanted = out.strip()
    assert node.run(NODE, f"sysctl -w {SYSCTL}={int(wanted) + 1024}")[0] == 0
    site = site_managing(site_copy, tmp_path, ["memory"])
    as_found = [section for section in SECTIONS if section != "memory"]

    # nothing-managed still plans nothing, though a live value drifted (the audit names it)
    nothing = site_managing(site_copy, tmp_path / "nothing", [])
    assert sparkbase(node, nothing, "plan", "--json").returncode == 0
    code, checks = audit(node, nothing, capsys)
    assert (code, checks[f"sysctl.{SYSCTL}"]) == (1, "fail")

    done = sparkbase(node, site, "plan", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    planned = report(done)
    assert planned["unmanaged"] == as_found and not planned["reboot_required"]
    changing = {(op["kind"], op["section"]) for op in planned["operations"] if op["status"] == "would change"}
    assert ("sysctl-apply", "memory") in changing
    assert {section for _, section in changing} <= {"memory", None}  # None: sparkbase's stamp
    assert {op["section"] for op in planned["operations"]} <= {"memory", None}

    done = sparkbase(node, site, "apply", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert report(done)["status"] == "changed" and not report(done)["rebooted"]
    assert node.run(NODE, f"sysctl -n {SYSCTL}")[1].strip() == wanted
    assert COMMENT in node.run(NODE, "cat /etc/nccl.conf")[1]  # nccl is as found: not rewritten

    assert sparkbase(node, site, "plan", "--json").returncode == 0
    code, checks = audit(node, site, capsys)
    assert [check for check, status in checks.items() if status == "fail"] == []
    assert (code, checks["nccl.conf"], checks["stamp"]) == (0, "skip", "pass")
