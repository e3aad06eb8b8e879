"""DKMS operations: build, sign and install a module for the baseline's kernel."""

from __future__ import annotations

from typing import Any

from pyinfra.api.operation import operation

from sparkbase.deploy.fact_memo import Ask, fact
from sparkbase.deploy.facts import (
    DkmsState,
    MokState,
)
from sparkbase.deploy.operations.base import Decision, carry_out
from sparkbase.deploy.operations.record import remember
from sparkbase.facts.model import MokCertificate
from sparkbase.facts.signing import judge_signature
from sparkbase.policy.ownership import (
    Kind,
    created,
    now_utc,
)


def decide_dkms_install(dkms_name: str, version: str, kernel: str, current: dict[str, Any],
                        certificates: list[MokCertificate], fingerprint: str | None) -> Decision:
    """Install the module for `kernel` unless DKMS has it installed and (with a pinned MOK)
    kmod reports it signed by that certificate (serial and issuer, as the audit judges it);
    a wrongly signed build is reinstalled with `--force`, which re-signs it."""
    target = f"{dkms_name}/{version}"
    install = ["dkms", "install", target, "-k", kernel]
    if not current["installed"] and current.get("warnings"):
        # DKMS lists it installed but warns that /lib/modules holds another module than it
        # built: a plain `dkms install` says "already installed"; `--force` installs the build
        return Decision([[*install, "--force"]], f"{target} for {kernel}: {'; '.join(current['warnings'])}")
    if not current["installed"]:
        return Decision([install])
    if fingerprint is None:
        return Decision([], f"{target} is installed for {kernel}")
    verdict = judge_signature(current["info"], tuple(certificates), fingerprint)
    if verdict.ok:
        return Decision([], f"{target} is installed for {kernel}, {verdict.detail}")
    return Decision([[*install, "--force"]], f"{target} for {kernel}: {verdict.detail}")


@operation()
def dkms_install(dkms_name: str, version: str, kernel: str, module: str, fingerprint: str | None,
                 baseline: str = "") -> Any:
    """Build, sign and install a DKMS module for `kernel` (the target, not the running one)."""
    current = fact(DkmsState, dkms_name=dkms_name, version=version, kernel=kernel, module=module)
    mok = fact(MokState) if fingerprint is not None and current["installed"] else None
    # a MOK imported by this run's earlier step is pending until the reboot: it counts
    certificates = [*mok["certificates"], *mok["pending_certificates"]] if mok else []
    yield from carry_out(decide_dkms_install(dkms_name, version, kernel, current, certificates, fingerprint))
    if not current.get("present", current["installed"]):  # a tree DKMS already listed is not ours
        yield from remember(created(Kind.DKMS, f"{dkms_name}/{version}", baseline, now_utc()))


def dkms_install_asks(dkms_name: str, version: str, kernel: str, module: str, **_: Any) -> list[Ask]:
    """The facts `dkms_install` reads while it is planned."""
    return [Ask.of(DkmsState, dkms_name=dkms_name, version=version, kernel=kernel, module=module),
            Ask.of(MokState)]
