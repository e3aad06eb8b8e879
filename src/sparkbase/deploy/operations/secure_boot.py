"""Secure Boot operations: MOK enrolment."""

from __future__ import annotations

from typing import Any

from pyinfra.api.operation import operation

from sparkbase.deploy.node import mok_state, node_facts
from sparkbase.deploy.operations.base import cmd, noop
from sparkbase.deploy.results import DEFERRED
from sparkbase.policy.mok import console_text


@operation()
def mok_import(certificate: str, fingerprint: str) -> Any:
    """`mokutil --import` the certificate unless enrolled or already pending."""
    mok = mok_state(node_facts())
    if fingerprint in mok["enrolled"]:
        noop(f"MOK {fingerprint[:11]}… is enrolled")
        return
    if fingerprint in mok["pending"]:
        noop(f"{DEFERRED}MOK {fingerprint[:11]}… is imported; its enrolment waits for a person at the "
             f"console at the next boot: {console_text()}")
        return
    yield cmd("mokutil", "--import", certificate, "--root-pw")
