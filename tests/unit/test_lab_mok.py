"""The lab's own MOK key pair: made per lab, never shipped, refused for any other target."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

import sparkbase
from sparkbase.cli.deploying import mok_files
from sparkbase.deploy.mok_keys import (
    DeployConfigError,
    MokFiles,
    is_lab_key,
    mok_dir_from_env,
    refuse_lab_key,
)
from sparkbase_lab import mok

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lab_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("lab")
    mok.ensure_key_pair(directory)
    return directory


def _openssl(cert: Path, *args: str) -> str:
    out = subprocess.run(["openssl", "x509", "-inform", "DER", "-in", str(cert), "-noout", *args],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_the_pair_is_made_in_the_lab_dir_private(lab_dir: Path) -> None:
    directory = mok.key_dir(lab_dir)
    assert directory == lab_dir / "mok"
    assert (directory.stat().st_mode & 0o777) == 0o700
    assert ((directory / "MOK.priv").stat().st_mode & 0o777) == 0o600
    assert "PRIVATE KEY" in (directory / "MOK.priv").read_text()


def test_the_certificate_says_it_is_a_lab_key_with_a_random_20_byte_serial(lab_dir: Path) -> None:
    cert = mok.key_dir(lab_dir) / "MOK.der"
    subject = _openssl(cert, "-subject", "-nameopt", "compat")
    assert subject == "subject=/CN=sparkbase lab MOK (not for production)"
    serial = _openssl(cert, "-serial").split("=", 1)[1]
    assert len(serial) == 40 and int(serial[:2], 16) < 0x80 and serial[:2] != "00"
    assert "Code Signing" in _openssl(cert, "-text")


def test_a_second_call_keeps_the_pair_and_two_labs_differ(lab_dir: Path, tmp_path: Path) -> None:
    cert = mok.key_dir(lab_dir) / "MOK.der"
    before = cert.read_bytes()
    mok.ensure_key_pair(lab_dir)
    assert cert.read_bytes() == before
    other = mok.ensure_key_pair(tmp_path) / "MOK.der"
    assert _openssl(other, "-serial") != _openssl(cert, "-serial")


def test_no_private_key_ships_in_the_package() -> None:
    package = Path(sparkbase.__file__).parent
    assert not list(package.rglob("*.priv"))
    assert not [p for p in package.rglob("*") if p.is_file() and b"PRIVATE KEY-----" in p.read_bytes()]


def test_a_lab_key_is_refused_for_a_target_that_is_not_the_lab(lab_dir: Path) -> None:
    pair = MokFiles.from_dir(mok.key_dir(lab_dir))
    assert is_lab_key(pair)
    with pytest.raises(DeployConfigError, match="sparkbase lab key"):
        refuse_lab_key(pair, None)
    assert refuse_lab_key(pair, lab_dir) == pair


def test_mok_dir_naming_a_lab_key_exits_2_without_the_lab(
    lab_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = argparse.Namespace(mok_dir=mok.key_dir(lab_dir))
    with pytest.raises(SystemExit) as exc:
        mok_files(args, None)
    assert exc.value.code == 2 and "sparkbase lab key" in capsys.readouterr().err
    assert mok_files(args, lab_dir) == MokFiles.from_dir(mok.key_dir(lab_dir))


def test_the_env_key_dir_is_held_to_the_same_rule(lab_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKBASE_MOK_DIR", str(mok.key_dir(lab_dir)))
    with pytest.raises(DeployConfigError):
        mok_dir_from_env(None)
    monkeypatch.delenv("SPARKBASE_MOK_DIR")
    assert mok_dir_from_env(lab_dir) == MokFiles.from_dir(lab_dir / "mok")
    assert mok_dir_from_env(None) is None


def test_a_site_key_is_accepted_anywhere(tmp_path: Path) -> None:
    subprocess.run(["openssl", "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
                    "-subj", "/CN=spark fleet MOK/", "-keyout", str(tmp_path / "MOK.priv"),
                    "-outform", "DER", "-out", str(tmp_path / "MOK.der")], capture_output=True, check=True)
    pair = MokFiles.from_dir(tmp_path)
    assert not is_lab_key(pair)
    assert refuse_lab_key(pair, None) == pair


def test_the_key_pair_sparkbase_0_1_0_shipped_is_a_lab_key(tmp_path: Path) -> None:
    """Known by its fingerprint: copies of the retired in-repository pair are refused too."""
    committed = subprocess.run(["git", "-C", str(REPO), "show", "5434e31:src/sparkbase/lab/mok/MOK.der"],
                               capture_output=True, check=False)
    if committed.returncode != 0:
        pytest.skip("git history not available")
    (tmp_path / "MOK.der").write_bytes(committed.stdout)
    assert is_lab_key(MokFiles.from_dir(tmp_path))


def test_the_shipped_variant_pins_no_lab_key() -> None:
    text = (REPO / "baselines" / "ds41f-7x-64k.yaml").read_text()
    assert "mok_fingerprint: null" in text and "site to confirm" in text
