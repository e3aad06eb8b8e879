"""The lab's image catalogue: what `docker pull` can fetch on a node (there is no network).

Each entry is one image as a registry and a Docker engine describe it: repository, tag (or
none, for an image the site pulls by digest), manifest digest (what `repo@sha256:...` names
and `RepoDigests` shows), image ID (`sha256:` of its config, what `docker inspect` calls
`Image`), and the config fields `docker image inspect` prints. The site's notes give only the
production image's repository and the first 8 hex digits of its digest (`f617afd8`); every
other digit, ID, date, size, layer and environment value here is the lab's own, derived from a
fixed phrase so that it never changes (`lab_hex`).

`nccl_path` is where the image's own libnccl lives (torch's NCCL wheel, `nvidia/nccl/lib`):
a container maps that path, which is the site's library when the site bind-mounts it there,
else the image's private copy (`nccl_bytes`, a stand-in file).

Imported by the `docker` stand-in (cmd_docker.py) and, on the machine, by the as-found lab
and its faults; imports only `hashlib`.
"""

from __future__ import annotations

import hashlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any


def lab_hex(phrase: str, length: int = 64) -> str:
    """Lab-made hex digits: the sha256 of `phrase` (stable, never a real value)."""
    return hashlib.sha256(phrase.encode()).hexdigest()[:length]


#: the production lane's repository (the notes)
PRODUCTION_REPOSITORY = "aidendle94/sparkrun-sglang-dsv41-gb10"
#: the first digits of the production digest, as the notes give them
PRODUCTION_DIGEST_PREFIX = "f617afd8"
#: the production image's manifest digest: the notes' 8 hex digits, then 56 the lab made
PRODUCTION_DIGEST = "sha256:" + PRODUCTION_DIGEST_PREFIX + lab_hex("dsv41 production manifest", 56)
#: a later build of the same repository (the queued SGLang upgrade; lab-made digest)
NEXT_DIGEST = "sha256:" + lab_hex("dsv41 sglang 0.5.22 manifest")
#: the production image as an operator names it (`docker run REPO@DIGEST`)
PRODUCTION_REFERENCE = f"{PRODUCTION_REPOSITORY}@{PRODUCTION_DIGEST}"
NEXT_REFERENCE = f"{PRODUCTION_REPOSITORY}@{NEXT_DIGEST}"
#: where torch's NCCL wheel puts libnccl in these images (python 3.12 dist-packages, as NGC
#: images on a DGX Spark lay it out: LD_LIBRARY_PATH .../python3.12/dist-packages/torch/lib)
TORCH_NCCL_PATH = "/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2"

_CUDA_ENV = (
    "PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "NVIDIA_VISIBLE_DEVICES=all",
    "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
    "CUDA_VERSION=13.0.1",
    "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
    "PYTHONUNBUFFERED=1",
)


def _image(repository: str, tag: str | None, digest: str, phrase: str, created: str, version: str,
           engine_env: tuple[str, ...], size: int) -> dict[str, Any]:
    return {
        "repository": repository,
        "tag": tag,
        "digest": digest,
        "id": "sha256:" + lab_hex(phrase + " config"),
        "created": created,
        "size": size,
        "env": [*_CUDA_ENV, *engine_env],
        "cmd": ["/bin/bash"],
        "entrypoint": None,
        "working_dir": "/workspace",
        "labels": {"org.opencontainers.image.ref.name": "ubuntu",
                   "org.opencontainers.image.version": version},
        "layers": ["sha256:" + lab_hex(f"{phrase} layer {n}") for n in range(6)],
        "nccl_path": TORCH_NCCL_PATH,
        "nccl_bytes": f"libnccl.so.2 as the image {phrase} ships it (lab stand-in)\n".encode(),
    }


#: every image a node can pull, in no particular order
CATALOGUE: tuple[dict[str, Any], ...] = (
    _image(PRODUCTION_REPOSITORY, None, PRODUCTION_DIGEST, "sparkrun-sglang-dsv41-gb10 production",
           "2026-09-29T06:12:44.318205977Z", "24.04", ("SGLANG_VERSION=0.0.0.dev1+gda64c5cbb",
                                                       "TORCH_VERSION=2.13.0+cu130"), 24_118_502_913),
    _image(PRODUCTION_REPOSITORY, None, NEXT_DIGEST, "sparkrun-sglang-dsv41-gb10 sglang 0.5.22",
           "2026-10-19T21:40:03.552910114Z", "24.04", ("SGLANG_VERSION=0.5.22",
                                                       "TORCH_VERSION=2.13.0+cu130"), 24_390_117_482),
    _image("jovian-judgement", "r39-glm53", "sha256:" + lab_hex("jovian-judgement r39-glm53 manifest"),
           "jovian-judgement r39-glm53", "2026-09-14T11:02:51.907316220Z", "24.04",
           ("VLLM_VERSION=0.31.1.dev0",), 21_004_776_151),
)


def split_reference(reference: str) -> tuple[str, str | None, str | None]:
    """`repo[:tag][@sha256:...]` as (repository, tag, digest); a plain name is `:latest`."""
    name, _, digest = reference.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = None
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    if tag is None and not digest:
        tag = "latest"
    if name.startswith("docker.io/"):
        name = name[len("docker.io/") :]
    if name.startswith("library/"):
        name = name[len("library/") :]
    return name, tag, digest or None


def find(reference: str) -> dict[str, Any] | None:
    """The catalogue image a reference names (by digest when it gives one, else by tag)."""
    repository, tag, digest = split_reference(reference)
    for image in CATALOGUE:
        if image["repository"] != repository:
            continue
        if digest is not None and image["digest"] == digest:
            return image
        if digest is None and tag is not None and image["tag"] == tag:
            return image
    return None


def known_repository(repository: str) -> bool:
    """Whether the catalogue has any image of `repository` (docker's errors differ)."""
    return any(image["repository"] == repository for image in CATALOGUE)


def build_of(image_id: str) -> str:
    """The engine build a container of image `image_id` answers as (the stand-in's
    `SPARKBASE_LAB_BUILD`, openai_api.py): `image-` and the first 12 hex digits of the image's
    manifest digest, so faults name a build by the digest an operator pins."""
    image = next((i for i in CATALOGUE if i["id"] == image_id), None)
    digest = image["digest"] if image is not None else image_id
    return "image-" + digest.removeprefix("sha256:")[:12]
