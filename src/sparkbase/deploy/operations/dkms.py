"""DKMS operations: place a module's pinned source, then build, sign and install it for the
baseline's kernel."""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api.operation import operation

from sparkbase.deploy.node import mok_state, node_facts, owned_record
from sparkbase.deploy.operations.base import Decision, carry_out
from sparkbase.deploy.operations.record import remember
from sparkbase.deploy.results import KEPT
from sparkbase.facts.model import MokCertificate, NodeFacts
from sparkbase.facts.signing import judge_signature
from sparkbase.facts.state import SOURCE_STAMP
from sparkbase.model.ownership import Kind, created, now_utc


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
    facts = node_facts()
    current = dkms_state(facts, dkms_name, version, kernel, module)
    mok = mok_state(facts) if fingerprint is not None and current["installed"] else None
    # a MOK imported by this run's earlier step is pending until the reboot: it counts
    certificates = [*mok["certificates"], *mok["pending_certificates"]] if mok else []
    yield from carry_out(decide_dkms_install(dkms_name, version, kernel, current, certificates, fingerprint))
    if not current.get("present", current["installed"]):  # a tree DKMS already listed is not ours
        yield from remember(created(Kind.DKMS, f"{dkms_name}/{version}", baseline, now_utc()))


def dkms_state(facts: NodeFacts, dkms_name: str, version: str, kernel: str, module: str) -> dict[str, Any]:
    """Whether DKMS has `dkms_name/version` installed for `kernel` (`installed`: DKMS installed
    what it built, no WARNING note beside the state, as the audit judges it; `warnings`: what
    DKMS says of a tree it lists as installed but did not build), and the target kernel's
    `modinfo` of the module (its signature as kmod reports it)."""
    entries = [entry for entry in facts.dkms if entry.name == dkms_name and entry.version == version
               and entry.kernel == kernel and entry.status == "installed"]
    return {"installed": any(entry.installed for entry in entries),
            "present": bool(entries),
            "warnings": [warning for entry in entries for warning in entry.warnings],
            "info": facts.kernel_modinfo[(kernel, module)], "noise": list(facts.dkms_noise)}


def source_tree(dkms_name: str, version: str) -> str:
    """Where DKMS finds a module's source: /usr/src/NAME-VERSION."""
    return f"/usr/src/{dkms_name}-{version}"


def place_source_script(dkms_name: str, version: str, url: str, sha256: str) -> str:
    """Fetch the tarball, check its sha256 before anything is unpacked, unpack its one top
    directory into a temporary tree, stamp the sha256 into it, move it into place, register
    it with DKMS. Every value is quoted; a failed step leaves /usr/src as it was."""
    tree = shlex.quote(source_tree(dkms_name, version))
    return "; ".join([
        "set -e",
        't=$(mktemp -d /usr/src/.sparkbase-source.XXXXXX)',
        'trap \'rm -rf "$t"\' EXIT',
        f'curl -fsSL --proto =https,file -o "$t/source.tar.gz" {shlex.quote(url)}',
        f'printf \'%s  %s\\n\' {shlex.quote(sha256)} "$t/source.tar.gz" | sha256sum -c --quiet -',
        'mkdir "$t/tree"',
        'tar -xzf "$t/source.tar.gz" -C "$t/tree" --strip-components=1 --no-same-owner --no-same-permissions',
        f'printf \'%s\\n\' {shlex.quote(sha256)} > "$t/tree/{SOURCE_STAMP}"',
        'chmod -R u=rwX,go=rX "$t/tree"',
        f'mv "$t/tree" {tree}',
        f"dkms add -m {shlex.quote(dkms_name)} -v {shlex.quote(version)}",
    ])


def decide_dkms_source(dkms_name: str, version: str, url: str, sha256: str, state: dict[str, Any],
                       ours: bool) -> Decision:
    """Place and register the pinned source unless /usr/src holds it already (stamped with
    this sha256); a tree sparkbase did not place is kept and built as found (reported); a
    tree it placed from another tarball is replaced (its DKMS registration removed first)."""
    tree = source_tree(dkms_name, version)
    if state["present"] and state["sha256"] == sha256:
        if state["registered"]:
            return Decision([], f"{tree} is the pinned checkout (sha256 {sha256[:12]}…), registered")
        return Decision([["dkms", "add", "-m", dkms_name, "-v", version]], f"register {tree}")
    script = ["sh", "-c", place_source_script(dkms_name, version, url, sha256)]
    if not state["present"]:
        return Decision([script])
    if not ours:
        return Decision([], f"{KEPT}{tree} was not placed by sparkbase from the pinned tarball: DKMS builds "
                        "it as found (remove it, and its DKMS registration, to have apply place the pin)")
    remove = [["dkms", "remove", f"{dkms_name}/{version}", "--all"]] if state["registered"] else []
    return Decision([*remove, ["rm", "-rf", "--", tree], script],
                    f"{tree} came from another tarball (sha256 {state['sha256'] or 'none'})")


@operation()
def dkms_source(dkms_name: str, version: str, url: str, sha256: str, baseline: str = "") -> Any:
    """Place a DKMS module's pinned source checkout in /usr/src and register it (recorded)."""
    state = node_facts().dkms_sources[(dkms_name, version)]
    owned = owned_record()
    tree = source_tree(dkms_name, version)
    decision = decide_dkms_source(dkms_name, version, url, sha256, state,
                                  owned.find(Kind.DKMS_SOURCE, tree) is not None)
    yield from carry_out(decision)
    if decision.commands and decision.commands[-1][0] == "sh":
        yield from remember(created(Kind.DKMS_SOURCE, tree, baseline, now_utc(), sha256=sha256))
