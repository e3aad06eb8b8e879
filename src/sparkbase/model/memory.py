"""The memory section: swap, the installer's swap file, THP, sysctls, the memory saver."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, StringConstraints

from sparkbase.model.paths import SwapFilePath
from sparkbase.model.types import Name, PageSize, Sha256, StrictModel, text_value

SysctlKey = Annotated[str, StringConstraints(pattern=r"^(vm|kernel|net|fs)(\.[a-z0-9_]+){1,4}$")]
SysctlValue = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_. -]{1,64}$")]


class SwapSpec(StrictModel):
    """A swap file."""

    path: SwapFilePath = Field(description="swap file path (not under a system tree)")
    size_gib: int = Field(ge=1, le=512, description="size in GiB")
    header_page_size: PageSize = Field(description="page size written in the swap header")


#: where the DGX OS installer (Ubuntu's curtin) puts its swap file, with a 4 KiB header
FACTORY_SWAP_PATH = "/swap.img"
#: the page size the installer writes the swap header for (DGX OS installs a 4 KiB kernel)
FACTORY_SWAP_HEADER = 4096


class FactorySwapSpec(StrictModel):
    """The installer's swap file, which sparkbase never creates, resizes or deletes.

    `fstab: noauto` is the recipe's (spark-ds41f install-boot-support.sh): its /etc/fstab
    line keeps the file but no longer activates it at boot. sparkbase records the line as it
    found it and puts it back when the node moves to a baseline that does not ask for
    `noauto`, if nobody changed the line since. `fstab: as-installed` leaves the line alone
    and judges that the file is the node's active swap (the recipe's 4 KiB profile swaps on
    it: host/kernel-memory/spark3-kernel-memory).
    """

    path: SwapFilePath = Field(default=FACTORY_SWAP_PATH, description="the installer's swap file")
    fstab: Literal["as-installed", "noauto"] = Field(
        description="as-installed: its fstab line activates it at boot (the node's swap); "
        "noauto: sparkbase marks its fstab line noauto (recorded, undone on move-back)"
    )
    swapoff: bool = Field(
        default=False,
        description="with noauto, also switch it off now when it is active (the recipe never swaps "
        "off a live file: it stops at the next boot)",
    )


#: a module's `srcversion` as kmod and /sys/module print it (modpost's hex digest)
SrcVersion = Annotated[str, StringConstraints(pattern=r"^[0-9A-F]{16,32}$")]


#: a git commit, full length (a short id can become ambiguous)
GitRevision = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")]
#: an https URL of a public git repository (no credentials, query or fragment)
RepositoryUrl = Annotated[str, StringConstraints(
    pattern=r"^https://[A-Za-z0-9.-]{1,100}(/[A-Za-z0-9._~+-]{1,100}){1,6}$", max_length=300)]


class DkmsSource(StrictModel):
    """The source a DKMS module is built from: a repository at a pinned revision, placed on
    the node as a tarball of that checkout whose sha256 is pinned (`git archive` of the
    revision, one top directory). apply fetches it (from the site's source mirror, else the
    repository host's archive of the revision), checks the sha256, unpacks it into
    /usr/src/NAME-VERSION and registers it with `dkms add`, as the recipe registers its
    checkout (spark-ds41f experiments/2026-10-02-memory-saver-capacity/install-dkms.sh)."""

    repository: RepositoryUrl = Field(description="the git repository the module comes from")
    revision: GitRevision = Field(description="the commit DKMS builds (40 hex digits)")
    sha256: Sha256 = Field(description="sha256 of the tarball of that checkout (what apply verifies)")

    def tarball(self, dkms_name: str) -> str:
        """The tarball's file name in a source mirror: NAME-REVISION.tar.gz."""
        return f"{dkms_name}-{self.revision}.tar.gz"

    def archive_url(self) -> str:
        """Where the repository host serves the revision as a tarball (GitHub's archive)."""
        return f"{self.repository.removesuffix('.git')}/archive/{self.revision}.tar.gz"


class MemorySaverSpec(StrictModel):
    """The memory saver (spark-ds41f): a patched `nvidia-uvm` that DKMS builds and installs
    under `updates/dkms`, where it replaces the stock module at load. It is no module of its
    own: the loaded `nvidia_uvm` is told apart from the stock one by its `srcversion`, and
    its build turns packing on by default (no modprobe option: the stock module refuses it)."""

    required: bool = Field(description="the module must be built, signed and loaded")
    source: DkmsSource = Field(description="the checkout DKMS builds it from (repository, revision, sha256)")
    dkms_name: Name = Field(description="DKMS module name (dkms status)")
    dkms_version: Name = Field(description="DKMS module version")
    module: Name = Field(description="kernel module name as loaded (/proc/modules)")
    srcversion: SrcVersion | None = Field(
        default=None, description="srcversion of the loaded patched module (None: not judged)"
    )
    packing_parameter: Name = Field(description="module parameter that shows packing (built-in default)")
    packing: bool = Field(description="packing on (Y) or off (N)")


#: `swap_by_page_size`: a header is written for one page size, so a kernel of another page size
#: refuses the file; the recipe's answer (spark-ds41f host/kernel-memory/spark3-kernel-memory and
#: its service, db98392f) is a oneshot unit before `swap.target` that swaps on the file made for
#: `getconf PAGESIZE`; sparkbase renders its own. The unit (oneshot, before swap.target, wanted by
#: swap.target):
BOOT_SWAP_UNIT = "sparkbase-swap.service"
#: where it lives (sparkbase writes it whole, with its ownership record)
BOOT_SWAP_UNIT_FILE = f"/etc/systemd/system/{BOOT_SWAP_UNIT}"
#: the script it runs
BOOT_SWAP_SCRIPT = "/usr/local/sbin/sparkbase-swap"


class MemorySpec(StrictModel):
    """Memory policy: swap, THP, sysctls, memory-saver, display carve-out."""

    swap: SwapSpec | None = Field(default=None, description="swap file, or none")
    factory_swap: FactorySwapSpec | None = Field(
        default=None, description="what becomes of the installer's /swap.img, or none (left as found)"
    )
    transparent_hugepages: Literal["always", "madvise", "never"] = Field(
        description="/sys/kernel/mm/transparent_hugepage/enabled"
    )
    sysctls: dict[SysctlKey, Annotated[SysctlValue, BeforeValidator(text_value)]] = Field(
        default_factory=dict, description="kernel settings written to sysctl.d and applied live"
    )
    memory_saver: MemorySaverSpec | None = Field(
        default=None, description="the memory-saver DKMS module, or none"
    )
    display_carveout: bool = Field(
        default=False, description="GB10 display carve-out returned to serving (needs nvidia-drm modeset)"
    )
    swap_by_page_size: bool = Field(
        default=False,
        description="a boot unit sparkbase renders (sparkbase-swap.service) swaps on the file whose "
        "header is the running kernel's page size: the swap file on its page size, the installer's "
        "(noauto) on 4 KiB; the swap file then has no /etc/fstab line, so every kernel boots with swap",
    )

    def swap_files(self) -> dict[int, str]:
        """Page size -> the swap file a kernel of that page size swaps on at boot under
        `swap_by_page_size`: the baseline's swap file on its header's page size, the
        installer's on 4 KiB (its header's) when the baseline keeps it noauto."""
        files: dict[int, str] = {}
        factory = self.factory_swap
        if factory is not None and factory.fstab == "noauto":
            files[FACTORY_SWAP_HEADER] = factory.path
        if self.swap is not None:
            files[self.swap.header_page_size] = self.swap.path
        return dict(sorted(files.items()))
