"""Missing SSH files are a configuration error located in the inventory, never a connection attempt."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sparkbase.cli.main import main
from sparkbase.errors import ConfigError
from sparkbase.model.site import load_site
from sparkbase.transport import ssh_targets

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def site_dir(tmp_path: Path) -> Path:
    for part in ("baselines", "inventory", "lanes"):
        shutil.copytree(REPO / part, tmp_path / part)
    return tmp_path


def test_missing_ssh_config_and_known_hosts_point_at_the_inventory_lines(site_dir: Path) -> None:
    site = load_site(site_dir)
    with pytest.raises(ConfigError) as caught:
        ssh_targets(site)
    problems = {p.path: p for p in caught.value.problems}
    assert set(problems) == {"ssh.config", "ssh.known_hosts"}
    text = (site_dir / "inventory" / "site.yaml").read_text().splitlines()
    for path, key in (("ssh.config", "config:"), ("ssh.known_hosts", "known_hosts:")):
        problem = problems[path]
        assert problem.file == site_dir / "inventory" / "site.yaml"
        assert text[problem.line - 1].strip().startswith(key)


def test_targets_resolve_once_the_files_exist(site_dir: Path) -> None:
    (site_dir / "inventory" / "ssh_config").write_text("Host spark1\n  HostName 127.0.0.1\n")
    (site_dir / "inventory" / "known_hosts").write_text("")
    targets = ssh_targets(load_site(site_dir))
    assert sorted(targets) == ["spark1", "spark2", "spark3", "spark4"]
    assert targets["spark1"].config_file == site_dir / "inventory" / "ssh_config"


def test_a_lab_dir_without_a_fleet_is_refused(site_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no emulated fleet"):
        ssh_targets(load_site(site_dir), tmp_path / "no-lab")


@pytest.mark.parametrize("command", [["audit"], ["preflight", "dsv41-flash"], ["plan"]])
def test_commands_exit_2_without_a_traceback(
    site_dir: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--site", str(site_dir)]) == 2
    err = capsys.readouterr().err
    assert "ssh.config" in err and "Traceback" not in err
