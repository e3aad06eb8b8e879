"""The lab's own MOK key pair: made when a lab is built, kept in the lab directory only.

Ubuntu makes a machine owner key with `openssl req -new -x509 -newkey rsa:2048 … -outform DER`
(shim-signed's `update-secureboot-policy --new-key`); the lab does the same, once per lab
directory, so no private key ships in the repository or the wheel. The certificate's
subject marks it as a lab key, so a deploy refuses it for any target that is not the lab
(`sparkbase.deploy.mok_keys`); it reads the pair from `<lab dir>/mok/` (`KEY_DIR`), never
by importing this package. The serial number is 20 random bytes, as real CAs and openssl
make them, so the serial kmod prints as `sig_key` is the enrolled certificate's.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
from pathlib import Path

#: the key pair's directory inside a lab directory (the CLI reads it from there)
KEY_DIR = "mok"
CERTIFICATE = "MOK.der"
PRIVATE_KEY = "MOK.priv"
#: the certificate's subject CN: it says what the key is, and deploys recognise it by it
LAB_KEY_CN = "sparkbase lab MOK (not for production)"

#: the extensions Ubuntu's MOK certificate carries (module signing, code signing)
OPENSSL_CONFIG = """\
[ req ]
distinguished_name = req_distinguished_name
x509_extensions = v3
prompt = no
string_mask = utf8only

[ req_distinguished_name ]
CN = {cn}

[ v3 ]
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
basicConstraints = critical,CA:FALSE
extendedKeyUsage = codeSigning,1.3.6.1.4.1.311.10.3.6,1.3.6.1.4.1.2312.16.1.2
nsComment = "sparkbase lab: for the emulated fleet only"
"""


class MokKeyError(RuntimeError):
    """The lab's key pair could not be made."""


def random_serial() -> str:
    """20 random bytes as a positive DER integer with no leading zero byte (hex)."""
    data = bytearray(secrets.token_bytes(20))
    data[0] = (data[0] & 0x7F) or 0x01
    return data.hex()


def key_dir(lab_dir: Path) -> Path:
    """Where a lab keeps its key pair."""
    return lab_dir / KEY_DIR


def ensure_key_pair(lab_dir: Path) -> Path:
    """Make the lab's MOK pair unless it exists (private key 0600 in a 0700 directory);
    return its directory."""
    directory = key_dir(lab_dir)
    cert, priv = directory / CERTIFICATE, directory / PRIVATE_KEY
    if cert.is_file() and priv.is_file():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        config = Path(tmp, "openssl.cnf")
        config.write_text(OPENSSL_CONFIG.format(cn=LAB_KEY_CN))
        new_cert, new_priv = Path(tmp, CERTIFICATE), Path(tmp, PRIVATE_KEY)
        old_umask = os.umask(0o077)
        try:
            result = subprocess.run(
                ["openssl", "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "36500",
                 "-sha256", "-config", str(config), "-set_serial", f"0x{random_serial()}",
                 "-outform", "DER", "-keyout", str(new_priv), "-out", str(new_cert)],
                capture_output=True, text=True, timeout=60, check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise MokKeyError(f"cannot run openssl to make the lab's MOK key pair: {exc}") from exc
        finally:
            os.umask(old_umask)
        if result.returncode != 0 or not new_cert.is_file() or not new_priv.is_file():
            raise MokKeyError(f"openssl could not make the lab's MOK key pair: {result.stderr.strip()}")
        new_priv.chmod(0o600)
        new_cert.chmod(0o644)
        os.replace(new_priv, priv)
        os.replace(new_cert, cert)
    return directory
