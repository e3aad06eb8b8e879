"""The checks plugin: items built from the registry, only when asked for (no test file needed)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from sparkbase.audit.checks import fleet_checks
from sparkbase.checks_plugin.session import SparkbaseSession
from sparkbase.facts.model import Unreachable
from sparkbase.model.site import load_site
from sparkbase.transport import FailureKind

REPO = Path(__file__).resolve().parents[2]


def pytest_run(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *argv],
                          capture_output=True, text=True, cwd=cwd, check=False, timeout=120)


def test_checks_dir_collects_one_item_per_check_and_host() -> None:
    result = pytest_run("checks", "--hosts=paramiko://spark1,paramiko://spark2", "--collect-only", "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    ids = result.stdout.splitlines()
    assert "sparkbase-checks::test_check[kernel.page_size-paramiko://spark1]" in ids
    assert "sparkbase-checks::test_check[kernel.page_size-paramiko://spark2]" in ids
    fleet = [line for line in ids if line.startswith("sparkbase-checks::test_fleet_check[")]
    assert len(fleet) == len(fleet_checks())


def test_checks_refuse_a_backend_that_skips_host_keys() -> None:
    result = pytest_run("checks", "--hosts=local://", "--collect-only", "-q")
    assert result.returncode == 4  # usage error
    assert "backend 'local' cannot be held to the node's host key" in result.stderr


def test_a_bad_site_is_a_usage_error_naming_the_file(tmp_path: Path) -> None:
    result = pytest_run("checks", "--hosts=paramiko://spark1", f"--sparkbase-site={tmp_path}",
                        "--collect-only", "-q")
    assert result.returncode == 4
    assert f"{tmp_path}/baselines/site.yaml:1:1: no site here" in result.stderr


def test_the_plugin_stays_out_of_other_runs(tmp_path: Path) -> None:
    (tmp_path / "test_other.py").write_text("def test_one():\n    pass\n")
    result = pytest_run("-p", "sparkbase.checks_plugin", str(tmp_path), "--collect-only", "-q", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "test_other.py::test_one" in result.stdout
    assert "sparkbase-checks" not in result.stdout


class _Answer:
    """What testinfra's OpenSSH backend hands back for one command."""

    def __init__(self, stdout: str, stderr: str = "", rc: int = 0) -> None:
        self.stdout, self.stderr, self.rc = stdout, stderr, rc


class _CutShortHost:
    """A testinfra host over the OpenSSH backend whose fact script answers its first
    section and then stops (a connection cut, an answer truncated on the way)."""

    def __init__(self) -> None:
        self.backend = SimpleNamespace(NAME="ssh", sudo=False, ssh_extra_args="",
                                       host=SimpleNamespace(name="spark1"))

    def run(self, command: str, *args: str) -> _Answer:
        marker = shlex.split(command.split("|")[0])[2].strip()  # printf %%s MARKER
        return _Answer(f"{marker} BEGIN uname\n6.17.0-1032-nvidia aarch64\n\n{marker} END uname 0\n")


def test_the_plugin_refuses_an_answer_cut_short() -> None:
    """The checks plugin reads an answer as the audit does (`collect.read_answer`): an answer
    that stops after its first section fails the node, it is not judged on half its facts."""
    session = SparkbaseSession(site=load_site(REPO), ssh_config=None, known_hosts=None)
    facts = session.facts_of(_CutShortHost())
    assert isinstance(facts, Unreachable)
    assert "cut short" in facts.reason and facts.kind is FailureKind.COMMAND
