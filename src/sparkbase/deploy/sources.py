"""Where the nodes fetch DKMS source tarballs: a site's mirror, the lab's, or the repository host.

A baseline pins each DKMS source by repository, revision and the tarball's sha256
(`model.memory.DkmsSource`). A site without a route to the repository host names a mirror
holding `NAME-REVISION.tar.gz` files with $SPARKBASE_DKMS_MIRROR (a URL prefix: https:// or
file:// on the node); the lab serves them beside its apt repository, at the same local path
in every node. The sha256 is checked on the node whatever the URL.
"""

from __future__ import annotations

import os
from pathlib import Path

#: the lab's mirror, as its nodes see it (sparkbase_lab.packages builds it beside the apt repo)
LAB_MIRROR = "file:///srv/sparkbase-lab/apt/sources"
#: the directory of `LAB_MIRROR` inside the lab's apt repository
LAB_MIRROR_DIR = "sources"


def source_mirror(lab: Path | None) -> str | None:
    """$SPARKBASE_DKMS_MIRROR, else the lab's mirror when the target is the lab, else None
    (the repository host's archive of each revision)."""
    named = os.environ.get("SPARKBASE_DKMS_MIRROR", "").strip()
    if named:
        return named
    return LAB_MIRROR if lab is not None else None
