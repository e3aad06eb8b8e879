"""Missing SSH files are a configuration error located in the inventory, never a connection attempt."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


SECRET = "root:$6$saltsalt$c2VjcmV0aGFzaA:19000:0:99999:7:::"

#: (case, which file, how to make it, what the error must say)
WRONG_SSH_FILES = [
    ("shadow-as-config", "ssh_config", "text:" + SECRET + "\n", "not an OpenSSH client config (line 1)"),
    ("garbage-on-line-3", "ssh_config", "text:Host spark1\n  HostName 127.0.0.1\n" + SECRET + "\n",
     "not an OpenSSH client config (line 3)"),
    ("binary-config", "ssh_config", "bytes:7f454c46ff00fe", "not an OpenSSH client config (not UTF-8 text)"),
    ("fifo-config", "ssh_config", "fifo", "not a regular file"),
    ("dev-zero-config", "ssh_config", "link:/dev/zero", "not a regular file"),
    ("directory-config", "ssh_config", "dir", "not a regular file"),
    ("huge-config", "ssh_config", "huge", "larger than 1024 KiB"),
    ("fifo-known-hosts", "known_hosts", "fifo", "not a regular file"),
    ("dev-zero-known-hosts", "known_hosts", "link:/dev/zero", "not a regular file"),
    ("directory-known-hosts", "known_hosts", "dir", "not a regular file"),
    ("shadow-as-known-hosts", "known_hosts", "text:" + SECRET + "\n",
     "not an OpenSSH known_hosts file (no host key on any line; line 1)"),
    ("bad-key-in-known-hosts", "known_hosts", "text:# enrolled by hand\nspark1 ssh-ed25519 $6$notbase64!\n",
     "not an OpenSSH known_hosts file (line 2)"),
    ("binary-known-hosts", "known_hosts", "bytes:ff00fe", "not an OpenSSH known_hosts file (not UTF-8 text)"),
]


def _make(path: Path, how: str) -> None:
    if how.startswith("text:"):
        path.write_text(how[5:])
    elif how.startswith("bytes:"):
        path.write_bytes(bytes.fromhex(how[6:]))
    elif how == "fifo":
        os.mkfifo(path)
    elif how.startswith("link:"):
        path.symlink_to(how[5:])
    elif how == "dir":
        path.mkdir()
    elif how == "huge":
        path.write_text("# comment\n" * 110_000)


@pytest.mark.parametrize(
    ("case", "which", "how", "said"), WRONG_SSH_FILES, ids=[c[0] for c in WRONG_SSH_FILES]
)
def test_a_wrong_ssh_file_is_located_and_never_echoed(
    site_dir: Path, case: str, which: str, how: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ssh.config: /etc/shadow` must not print the password hash; a FIFO must not hang."""
    files = {"ssh_config": "Host spark1\n  HostName 127.0.0.1\n", "known_hosts": ""}
    for name, text in files.items():
        path = site_dir / "inventory" / name
        if name == which:
            _make(path, how)
        else:
            path.write_text(text)
    assert main(["audit", "--site", str(site_dir)]) == 2
    err = capsys.readouterr().err
    assert f"ssh.{which.replace('ssh_', '')}: " in err and said in err, err
    assert "inventory/site.yaml:" in err
    assert "$6$" not in err and "Traceback" not in err


#: (extra pytest arguments, what the usage error says): backends the checks refuse
REFUSED_BACKENDS = [
    ([], "give --hosts=paramiko://NODE"),
    (["--hosts=local://"], "backend 'local' cannot be held to the node's host key"),
    (["--hosts=docker://spark1"], "backend 'docker'"),
    (["--hosts=spark1", "--connection=ansible"], "backend 'ansible'"),
    (["--hosts=paramiko://spark1", "--force-ansible"], "--force-ansible"),
]


@pytest.mark.parametrize(("extra", "said"), REFUSED_BACKENDS, ids=["no-hosts", "local", "docker", "ansible",
                                                                   "force-ansible"])
def test_the_checks_refuse_backends_that_cannot_be_strict(extra: list[str], said: str) -> None:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REPO / "checks"),
            f"--sparkbase-site={REPO}", *extra]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False, timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    assert said in done.stderr


def test_strict_openssh_options_come_first_and_are_quoted() -> None:
    from sparkbase.checks_plugin.session import strict_ssh_options

    options = strict_ssh_options(Path("/site dir/known_hosts"))
    assert options.startswith("-o StrictHostKeyChecking=yes ")
    assert "-o 'UserKnownHostsFile=/site dir/known_hosts'" in options
    assert "-o ControlMaster=no" in options and "-o UpdateHostKeys=no" in options
