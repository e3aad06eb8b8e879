"""The rule that a running container is the pinned image (references: `model.images`).

`pin_problem` is the launch rule: the container runs the image the lane pins when the
image's `RepoDigests` holds `REPO@DIGEST` (the digest Docker recorded when it pulled it), or
the container was created from the pinned reference itself (`Config.Image` names that
digest: Docker resolves a digest reference to exactly that content).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkbase.model.images import ImageReference, parse_reference, short_digest

if TYPE_CHECKING:
    from sparkbase.facts.parsers.docker import Container


def _references(texts: tuple[str, ...] | list[str]) -> list[ImageReference]:
    found: list[ImageReference] = []
    for text in texts:
        try:
            found.append(parse_reference(text))
        except ValueError:
            continue
    return found


def running_digests(container: Container, pinned: ImageReference) -> list[str]:
    """The digests the container's image is known by, the pinned repository's first:
    `RepoDigests`, then the digest `Config.Image` names."""
    digests = [ref for ref in _references(list(container.repo_digests)) if ref.digest]
    own = [ref.digest for ref in digests if ref.repository == pinned.repository]
    other = [ref.digest for ref in digests if ref.repository != pinned.repository]
    created = _references([container.image_ref])
    named = [ref.digest for ref in created if ref.digest]
    return list(dict.fromkeys(d for d in (*own, *named, *other) if d is not None))


def pin_problem(container: Container, pinned: ImageReference) -> str | None:
    """Why `container` does not run the `pinned` image (None: it does)."""
    for ref in _references([*container.repo_digests, container.image_ref]):
        if ref.digest == pinned.digest and ref.repository == pinned.repository:
            return None
    assert pinned.digest is not None
    digests = running_digests(container, pinned)
    # digests that differ past the shown prefix are shown in full
    show = short_digest if short_digest(pinned.digest) not in map(short_digest, digests) else str
    if digests:
        runs = ", ".join(show(d) for d in digests)
    else:
        runs = f"image {short_digest(container.image_id)} (no RepoDigests, not created from a digest)"
    return f"container {container.name} runs {runs}, lane pins {show(pinned.digest)}"
