"""Container image references, as Docker reads them.

A reference is Docker's `[DOMAIN/]PATH[:TAG][@DIGEST]` (distribution/reference's grammar:
lower-case path components joined by `/`, a tag of word characters, dots and dashes, a
digest `ALGO:HEX`); sparkbase pins by `sha256:` and 64 lower-case hex digits only.
Docker writes names of Docker Hub images short (`nginx`, `aidendle94/x`) in `RepoDigests`
and `Config.Image`; `canonical_repository` makes `nginx`, `library/nginx` and
`docker.io/library/nginx` one name, as Docker's own normalisation does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_DOMAIN = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,}$")
_SHA256 = re.compile(r"^sha256:[0-9a-f]{64}$")
#: Docker Hub, as Docker names it in full
HUB = "docker.io"


@dataclass(frozen=True)
class ImageReference:
    """One image reference, split as Docker splits it."""

    name: str
    tag: str | None = None
    digest: str | None = None

    @property
    def repository(self) -> str:
        """The repository in full (`docker.io/library/nginx` for `nginx`)."""
        return canonical_repository(self.name)

    def __str__(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        digest = f"@{self.digest}" if self.digest else ""
        return f"{self.name}{tag}{digest}"


def parse_reference(text: str) -> ImageReference:
    """`text` as an image reference; ValueError naming what is wrong."""
    shape = "REPOSITORY[:TAG][@sha256:<64 hex>]"
    if not text or len(text) > 512:
        raise ValueError(f"{text!r} is not an image reference ({shape})")
    rest, at, digest = text.partition("@")
    if at and _DIGEST.match(digest) is None:
        raise ValueError(f"{text!r}: {digest!r} is not a digest (sha256: and 64 hex digits)")
    colon = rest.rfind(":")
    name, tag = (rest[:colon], rest[colon + 1 :]) if colon > rest.rfind("/") else (rest, None)
    if tag is not None and _TAG.match(tag) is None:
        raise ValueError(f"{text!r}: {tag!r} is not a tag (letters, digits, '_', '.', '-'; at most 128)")
    first, sep, path = name.partition("/")
    domain = bool(sep) and ("." in first or ":" in first or first == "localhost")
    components = path.split("/") if domain else name.split("/")
    if (domain and _DOMAIN.match(first) is None) or not all(_COMPONENT.match(c) for c in components):
        raise ValueError(f"{text!r}: {name!r} is not a repository ({shape}: lower-case letters, digits and "
                         "'.', '_', '-' between them, components joined by '/', an optional registry first)")
    return ImageReference(name, tag, digest or None)


def pinned_reference(text: str) -> ImageReference:
    """`text` as a reference pinned by a sha256 digest; ValueError naming what is missing."""
    reference = parse_reference(text)
    if reference.digest is None:
        raise ValueError(f"{text!r} is not pinned by digest: write REPOSITORY[:TAG]@sha256:<64 hex digits> "
                         "(`docker image inspect --format '{{index .RepoDigests 0}}' IMAGE` prints it)")
    if _SHA256.match(reference.digest) is None:
        raise ValueError(f"{text!r}: the digest must be sha256: and 64 lower-case hex digits, "
                         f"not {reference.digest!r}")
    return reference


def canonical_repository(name: str) -> str:
    """The repository's full name: Docker Hub's domain and `library/` added where Docker
    leaves them out (a first component with no `.` or `:` that is not `localhost` is a
    Docker Hub path)."""
    first, sep, rest = name.partition("/")
    if not sep or ("." not in first and ":" not in first and first != "localhost"):
        first, rest = HUB, name
    if first == "index.docker.io":
        first = HUB
    if first == HUB and "/" not in rest:
        rest = f"library/{rest}"
    return f"{first}/{rest}"


def short_digest(digest: str) -> str:
    """`sha256:f617afd8…` (the algorithm and the first 8 hex digits)."""
    algorithm, sep, hexits = digest.partition(":")
    return f"{algorithm}:{hexits[:8]}…" if sep and len(hexits) > 8 else digest
