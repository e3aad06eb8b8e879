"""The starter site `sparkbase init` writes: the shipped example's baselines/, inventory/, lanes/.

One rule says which files belong to it (`STARTER_GLOBS`), used both by the wheel build
(setup.py copies them into `sparkbase/starter/site/`) and by a source checkout, which reads
them from the repository itself: there is no second copy to drift. Generated files (the
lock, renders, `.sparkbase/`) are not part of it. Standard library only: setup.py loads
this module by path before sparkbase is installed.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

#: which files of a site directory make the starter site (generated ones match none)
STARTER_GLOBS: tuple[str, ...] = ("baselines/*.yaml", "inventory/*.yaml", "lanes/*.yaml")
#: where the wheel build puts the starter site, inside this package
PACKAGED_SITE = "site"


class StarterMissing(RuntimeError):
    """Neither the packaged starter site nor a source checkout's site was found."""


def site_files(root: Path) -> dict[PurePosixPath, Path]:
    """The starter site's files under `root` (a site directory): relative path -> file."""
    found: dict[PurePosixPath, Path] = {}
    for pattern in STARTER_GLOBS:
        for path in sorted(root.glob(pattern)):
            if path.is_file() and not path.is_symlink():
                found[PurePosixPath(path.relative_to(root).as_posix())] = path
    return found


def starter_root() -> Path:
    """The directory holding the starter site: packaged in the wheel, else the checkout's root."""
    here = Path(__file__).resolve().parent
    packaged = here / PACKAGED_SITE
    if (packaged / "baselines" / "site.yaml").is_file():
        return packaged
    checkout = here.parents[2]  # src/sparkbase/starter -> the repository
    if (checkout / "pyproject.toml").is_file() and (checkout / "baselines" / "site.yaml").is_file():
        return checkout
    raise StarterMissing(f"no starter site in {packaged} or {checkout}: a broken installation")


def starter_files() -> dict[PurePosixPath, bytes]:
    """The starter site: relative path -> content."""
    return {rel: path.read_bytes() for rel, path in site_files(starter_root()).items()}
