"""Constrained scalar types shared by the models: each refuses text that could escape
where it lands (a shell line, a config file, a kernel command line)."""

from __future__ import annotations

import ipaddress
import socket
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints


class StrictModel(BaseModel):
    """Base of every sparkbase model: unknown keys are errors, values are immutable.

    Validation is strict: a value must already have its field's type (`abstract: 1` is not
    true, `rank: "1"` is not a number, `enabled: "yes"` is not a boolean), so what a file
    says is what the model holds. Integers are still accepted where a float is wanted.

    `defer_build`: a model's validator is built when it first validates, not at import, so a
    command pays only for the validators it runs.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, strict=True,
                              defer_build=True)


def _not_a_boolean(value: object) -> object:
    """`Literal[0, 1]` would take `true` as 1 (they compare equal); YAML's true is not 1."""
    if isinstance(value, bool):
        raise ValueError(f"must be the number 0 or 1, not {str(value).lower()}")
    return value


#: 0 or 1 as a number (NCCL_IB_MERGE_NICS, a ConnectX-7 port), never a YAML boolean
ZeroOrOne = Annotated[Literal[0, 1], BeforeValidator(_not_a_boolean)]
#: the highest CPU id a cpu list may name (the kernel's NR_CPUS on arm64 is 4096 at most)
MAX_CPU_ID = 4095
CpuId = Annotated[int, Field(ge=0, le=MAX_CPU_ID)]


#: a name used for files, units and inventory keys: no spaces, quotes or shell characters
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
#: a Debian package name / version
PackageName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9+.-]{1,100}$")]
PackageVersion = Annotated[str, StringConstraints(pattern=r"^[0-9][A-Za-z0-9.+~:-]{0,100}$")]
#: a kernel release such as 6.17.0-1032-nvidia or 7.0.0-1019-nvidia-64k
KernelRelease = Annotated[
    str, StringConstraints(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+-[0-9]+-[a-z0-9]+(-[a-z0-9]+)*$")
]
#: a kernel command-line argument (`kho=off`, `quiet`): no spaces, quotes or separators
KernelArg = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+(=[A-Za-z0-9_.,:/-]+)?$")]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
#: an OpenSSL-style SHA-1 fingerprint as mokutil prints it (aa:bb:…, 20 bytes)
Sha1Fingerprint = Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{2}:){19}[0-9a-f]{2}$")]
SemVer = Annotated[str, StringConstraints(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")]
PageSize = Literal[4096, 65536]
Netdev = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9]{1,15}$")]
SystemdUnit = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9@_.-]+\.(service|target|slice|socket|timer)$")
]


def _absolute_clean_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("must be an absolute path (start with /)")
    parts = value.split("/")
    if any(part in {"..", "."} for part in parts):
        raise ValueError("must not contain '.' or '..' components")
    if "//" in value or value.endswith("/"):
        raise ValueError("must be a normalised path (no '//' and no trailing '/')")
    return value


AbsPath = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9/_.+-]{1,255}$"),
    AfterValidator(_absolute_clean_path),
]


def _ipv4_interface(value: str) -> str:
    try:
        iface = ipaddress.IPv4Interface(value)
    except ValueError as exc:
        raise ValueError(f"not an IPv4 address with prefix: {exc}") from None
    if "/" not in value:
        raise ValueError("give the prefix length too, e.g. 192.168.101.1/24")
    return str(iface)


def _ipv4_network(value: str) -> str:
    try:
        return str(ipaddress.IPv4Network(value, strict=True))
    except ValueError as exc:
        raise ValueError(f"not an IPv4 network: {exc}") from None


def _not_an_address(value: str) -> str:
    """An SSH alias must not be something the resolver reads as an IPv4 address.

    `inet_aton` also takes `10.1`, `0x7f000001` and `2130706433`, as ssh does.
    """
    try:
        socket.inet_aton(value)
    except OSError:
        return value
    raise ValueError(
        "is an IP address; ssh_host is an SSH alias: define it in ssh_config (Host ALIAS, "
        "HostName ADDRESS) and name the alias here"
    )


#: an ssh_config Host alias: a Name that is never a raw address
SshAlias = Annotated[Name, AfterValidator(_not_an_address)]
IPv4Interface = Annotated[str, AfterValidator(_ipv4_interface)]
IPv4Network = Annotated[str, AfterValidator(_ipv4_network)]

#: GB10 fast cores (Cortex-X925): CPUs 5-9 and 15-19
GB10_FAST_CPUS: frozenset[int] = frozenset([*range(5, 10), *range(15, 20)])


def text_value(value: object) -> object:
    """YAML gives ints and bools for values like 0 or yes; sysctl/NCCL files want text."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return value


class PackagePin(StrictModel):
    """A Debian package held at one exact version."""

    name: PackageName = Field(description="Debian package name")
    version: PackageVersion = Field(description="exact Debian version to install and hold")
