"""The MOK key pair a deploy signs modules with: from $SPARKBASE_MOK_DIR or the lab's
directory, and never a lab key for a target that is not the lab."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path


class DeployConfigError(ValueError):
    """The deploy cannot be built from what the operator gave (a usage/config problem)."""


@dataclass(frozen=True)
class MokFiles:
    """The operator's MOK key pair on the local machine (the private key is a secret)."""

    certificate: Path
    private_key: Path

    @classmethod
    def from_dir(cls, directory: Path) -> MokFiles:
        """`MOK.der` and `MOK.priv` in `directory`."""
        return cls(directory / "MOK.der", directory / "MOK.priv")

    def fingerprint(self) -> str:
        """SHA-1 fingerprint of the certificate, as `mokutil` prints it (aa:bb:...)."""
        digest = hashlib.sha1(self.certificate.read_bytes()).hexdigest()  # noqa: S324 - MOK ids are SHA-1
        return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


#: the lab's key pair, inside a lab directory (`sparkbase lab up` makes it there)
LAB_MOK_DIR = "mok"
#: what marks a lab key: its certificate's subject CN (sparkbase_lab.mok.LAB_KEY_CN), and
#: the fingerprint of the key pair sparkbase 0.1.0 shipped in its source tree
LAB_KEY_MARK = b"sparkbase lab MOK (not for production)"
RETIRED_LAB_FINGERPRINTS = frozenset({"de:68:7c:66:aa:de:f7:ac:da:f7:f1:c7:c8:0f:80:9d:81:86:73:f1"})


def is_lab_key(mok: MokFiles) -> bool:
    """Whether the certificate is a sparkbase lab key (made for the emulated fleet)."""
    try:
        data = mok.certificate.read_bytes()
    except OSError:
        return False
    return LAB_KEY_MARK in data or mok.fingerprint() in RETIRED_LAB_FINGERPRINTS


def refuse_lab_key(mok: MokFiles | None, lab: Path | None) -> MokFiles | None:
    """`mok`, unless it is a lab key and the target is not the lab (DeployConfigError)."""
    if mok is not None and lab is None and is_lab_key(mok):
        raise DeployConfigError(
            f"MOK certificate {mok.certificate} is a sparkbase lab key: it signs for the "
            "emulated fleet only; give the site's own key pair with --mok-dir"
        )
    return mok


def mok_dir_from_env(lab: Path | None) -> MokFiles | None:
    """$SPARKBASE_MOK_DIR, or with a lab the key pair the lab made in its directory
    (`<lab dir>/mok`); a lab key for a target that is not the lab raises DeployConfigError."""
    if os.environ.get("SPARKBASE_MOK_DIR"):
        return refuse_lab_key(MokFiles.from_dir(Path(os.environ["SPARKBASE_MOK_DIR"])), lab)
    if lab is not None:
        return MokFiles.from_dir(lab / LAB_MOK_DIR)
    return None
