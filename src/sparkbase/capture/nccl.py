"""The nccl section from a live node: the library's package version and sha256."""

from __future__ import annotations

from sparkbase.capture.core import Collector
from sparkbase.facts.model import NodeFacts
from sparkbase.model.baseline import Baseline


def capture(facts: NodeFacts, baseline: Baseline, out: Collector) -> None:
    """The library's package version (a package) and sha256 (a host file)."""
    library = baseline.nccl.library
    if library.package is not None:  # a site-provided file has no package to read a version of
        out.put(("nccl", "library", "version"), facts.packages.get(library.package),
                f"{library.package} is not installed")
    if library.path is not None:  # an image's library is not on the host
        out.put(("nccl", "library", "sha256"), facts.file_sha256.get(library.path),
                f"{library.path} could not be hashed")
