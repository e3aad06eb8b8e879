"""The secure_boot section: Secure Boot's state and the MOK that signs DKMS modules."""

from __future__ import annotations

from pydantic import Field

from sparkbase.model.paths import MokKeyPath
from sparkbase.model.types import Sha1Fingerprint, StrictModel


class SecureBootSpec(StrictModel):
    """Secure Boot and the machine owner key used to sign DKMS modules."""

    enabled: bool = Field(description="Secure Boot must be on (true) or off (false)")
    mok_fingerprint: Sha1Fingerprint | None = Field(
        default=None, description="SHA-1 fingerprint of the enrolled MOK certificate (never the key)"
    )
    mok_certificate: MokKeyPath = Field(
        default="/var/lib/shim-signed/mok/MOK.der",
        description="where the MOK certificate lives on the node (DKMS signs with it)",
    )
    mok_private_key: MokKeyPath = Field(
        default="/var/lib/shim-signed/mok/MOK.priv",
        description="where the MOK private key lives on the node; secret, never read or printed",
    )
