"""Secure Boot (section `secure_boot`): the MOK key pair uploaded and imported for enrolment;
other baselines' key directories retired, their enrolled keys reported."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sparkbase.deploy.areas.files import Directory, Upload
from sparkbase.deploy.kinds import NodeReads, Step, StepArgs
from sparkbase.deploy.mok_keys import DeployConfigError

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta

    from sparkbase.deploy.mok_keys import MokFiles
    from sparkbase.model.baseline import Baseline
    from sparkbase.policy.foreign import Foreign


class MokImport(StepArgs, kind="mok-import"):
    """The MOK certificate imported for enrolment at the next boot."""

    certificate: str
    fingerprint: str

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.secure_boot import mok_import
        return mok_import(name=name, certificate=self.certificate, fingerprint=self.fingerprint)


class MokDirRetire(StepArgs, kind="mok-dir-retire"):
    """Another baseline's MOK key directory removed."""

    path: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.entries.append(self.path)

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import mok_dir_retire
        return mok_dir_retire(name=name, path=self.path)


class MokKept(StepArgs, kind="mok-kept"):
    """The MOK keys other baselines enrolled, reported (they stay in firmware)."""

    fingerprints: list[str]

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import mok_kept
        return mok_kept(name=name, fingerprints=self.fingerprints)



def mok_steps(baseline: Baseline, mok: MokFiles | None) -> list[Step]:
    """The MOK key pair uploaded and enrolled, when the baseline signs DKMS modules under
    Secure Boot; the key pair given must exist and be the one the baseline pins."""
    builds = baseline.dkms_builds()
    secure = baseline.secure_boot
    if not (builds and secure.enabled and baseline.manages("secure_boot")):
        return []
    if mok is None:
        what = " and ".join(f"the {build.purpose} module" for build in builds)
        raise DeployConfigError(
            f"{what} must be signed under Secure Boot: give the MOK key "
            "pair with --mok-dir DIR (or $SPARKBASE_MOK_DIR) holding MOK.der and MOK.priv"
        )
    for path in (mok.certificate, mok.private_key):
        if not path.is_file():
            raise DeployConfigError(f"MOK file {path} does not exist")
    if secure.mok_fingerprint is not None and mok.fingerprint() != secure.mok_fingerprint:
        raise DeployConfigError(
            f"MOK certificate {mok.certificate} has fingerprint {mok.fingerprint()}, the "
            f"baseline pins {secure.mok_fingerprint}"
        )
    key_dir = str(Path(secure.mok_private_key).parent)
    return [
        Step(Directory(path=key_dir, mode=0o700), f"MOK directory {key_dir} (0700)", section="secure_boot"),
        Step(Upload(path=secure.mok_certificate, local=str(mok.certificate), mode=0o644),
             f"MOK certificate {secure.mok_certificate}", section="secure_boot"),
        Step(Upload(path=secure.mok_private_key, local=str(mok.private_key), mode=0o600),
             f"MOK private key {secure.mok_private_key} (secret)", secret=True, section="secure_boot"),
        Step(MokImport(certificate=secure.mok_certificate, fingerprint=mok.fingerprint()),
             "import the MOK certificate (a person at the console enrols it at the next boot)",
             reboot=True, section="secure_boot"),
    ]


def retire_mok(foreign: Foreign) -> list[Step]:
    """The MOK key directories other baselines upload; their enrolled keys are only reported."""
    steps = []
    fingerprints: list[str] = []
    for mok in foreign.mok_dirs:
        steps.append(Step(MokDirRetire(path=mok.path), f"retire: MOK key directory {mok.path} "
                          f"({', '.join(mok.baselines)} signs with it)", section="secure_boot"))
        fingerprints += [key for key in mok.fingerprints if key not in fingerprints]
    if fingerprints:
        steps.append(Step(MokKept(fingerprints=fingerprints),
                          "keep: MOK keys other baselines enrolled stay in firmware (reported)",
                          section="secure_boot"))
    return steps
