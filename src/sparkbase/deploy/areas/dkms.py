"""DKMS modules (shared): a build's source fetched and checked, the module built for the
baseline's kernel and signed with the MOK; another baseline's module removed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkbase.deploy.kinds import NodeReads, Recorded, Step, StepArgs

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta

    from sparkbase.deploy.mok_keys import MokFiles
    from sparkbase.model.baseline import Baseline, DkmsBuild
    from sparkbase.policy.foreign import Foreign


class DkmsSource(Recorded, kind="dkms-source"):
    """A DKMS module's source fetched from `url`, checked against `sha256`, added to dkms."""

    dkms_name: str
    version: str
    url: str
    sha256: str

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.sources.append((self.dkms_name, self.version))

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.dkms import dkms_source
        return dkms_source(name=name, dkms_name=self.dkms_name, version=self.version, url=self.url,
                           sha256=self.sha256, baseline=self.baseline)


class DkmsInstall(Recorded, kind="dkms-install"):
    """A DKMS module built for `kernel` and signed with the MOK `fingerprint` (None: unsigned)."""

    dkms_name: str
    version: str
    kernel: str
    module: str
    fingerprint: str | None

    def reads(self, into: NodeReads, secret: bool) -> None:
        into.modinfo.append((self.kernel, self.module))

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.operations.dkms import dkms_install
        return dkms_install(name=name, dkms_name=self.dkms_name, version=self.version, kernel=self.kernel,
                            module=self.module, fingerprint=self.fingerprint, baseline=self.baseline)


class DkmsRetire(StepArgs, kind="dkms-retire"):
    """Another baseline's DKMS module removed, for every kernel."""

    dkms_name: str
    version: str

    def add(self, name: str, trigger: OperationMeta | None) -> OperationMeta:
        from sparkbase.deploy.retire import dkms_retire
        return dkms_retire(name=name, dkms_name=self.dkms_name, version=self.version)



def dkms_steps(baseline: Baseline, mok: MokFiles | None, mirror: str | None) -> list[Step]:
    """Each DKMS build of a managed section: its source (from `mirror`, a URL prefix, else
    the repository host), then the module built and signed with the MOK (`signing_key`).
    With secure_boot left as found, the builds sign with the key the site keeps at the
    baseline's key paths."""
    builds = baseline.dkms_builds()
    if not builds:
        return []
    fingerprint = signing_key(baseline, mok)
    steps = [_source_step(build, mirror) for build in builds
             if build.source is not None and baseline.manages(build.section)]
    return [*steps, *(
        Step(DkmsInstall(dkms_name=build.dkms_name, version=build.dkms_version,
                         kernel=baseline.kernel.release, module=build.module, fingerprint=fingerprint),
             f"build and sign {build.dkms_name}/{build.dkms_version} for {baseline.kernel.release} "
             f"({build.purpose})", reboot=True, section=build.section)
        for build in builds if baseline.manages(build.section))]


def source_url(build: DkmsBuild, mirror: str | None) -> str:
    """Where the node fetches a build's source tarball: the mirror's NAME-REVISION.tar.gz,
    else the repository host's archive of the revision."""
    assert build.source is not None
    if mirror:
        return f"{mirror.rstrip('/')}/{build.source.tarball(build.dkms_name)}"
    return build.source.archive_url()


def _source_step(build: DkmsBuild, mirror: str | None) -> Step:
    source = build.source
    assert source is not None
    return Step(DkmsSource(dkms_name=build.dkms_name, version=build.dkms_version,
                           url=source_url(build, mirror), sha256=source.sha256),
                f"{build.purpose} source: {source.repository} at {source.revision[:12]} in "
                f"/usr/src/{build.dkms_name}-{build.dkms_version} (sha256 checked, dkms add; recorded)",
                section=build.section)


def signing_key(baseline: Baseline, mok: MokFiles | None) -> str | None:
    """The SHA-1 fingerprint of the MOK the node's DKMS modules are signed with: the pinned
    MOK, else the key this deploy signs with (a site still to confirm its key, the lab's
    own); None without Secure Boot or a key."""
    secure = baseline.secure_boot
    if not secure.enabled:
        return None
    return secure.mok_fingerprint or (mok.fingerprint() if mok is not None else None)


def retire_dkms(foreign: Foreign) -> list[Step]:
    """Other baselines' DKMS modules removed, for every kernel (before their source package goes)."""
    return [Step(DkmsRetire(dkms_name=d.name, version=d.version),
                 f"retire: dkms remove {d.name}/{d.version} --all ({', '.join(d.baselines)}'s module)",
                 section=d.section) for d in foreign.dkms]
