"""pyinfra fact for DGX OS's tuning units: the running kernel, every CPU's governor and NVMe
feature 0x08, read in one fenced command (the audit's parsers read each part)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkbase.deploy.facts import _cmd, _Fenced
from sparkbase.facts import parsers as p
from sparkbase.facts.script import GOVERNOR_GLOB, NVME_COALESCING_COMMAND, Sections
from sparkbase.model.dgxos import NVME_COALESCING_FEATURE

TUNING_SECTIONS = (
    ("release", _cmd("uname", "-r")),
    ("governors", _cmd("grep", "-aH", "", "--") + " " + GOVERNOR_GLOB),
    ("nvme-coalescing", NVME_COALESCING_COMMAND),
)


@dataclass(frozen=True)
class Tuning:
    """What the tuning operations decide on."""

    release: str = ""
    governors: dict[int, str] = field(default_factory=dict)
    #: NVMe feature 0x08; None when `nvme get-feature` gave no readable answer
    nvme_coalescing: int | None = None


def read_tuning(found: Sections) -> Tuning:
    """The sections' answers (an unreadable part is empty, never guessed)."""
    release = found.get("release")
    governors = found.get("governors")
    nvme = found.get("nvme-coalescing")
    value: int | None = None
    if nvme is not None and nvme.status == 0:
        try:
            value = p.parse_nvme_feature(nvme.output, NVME_COALESCING_FEATURE)
        except ValueError:
            value = None
    return Tuning(
        release=release.output.strip() if release is not None and release.status == 0 else "",
        governors=p.parse_governors(governors.output) if governors is not None else {},
        nvme_coalescing=value,
    )


class TuningState(_Fenced[Tuning]):
    """Running kernel, CPU governors, NVMe interrupt coalescing."""

    def command(self) -> str:
        return self.fenced(TUNING_SECTIONS)

    def default(self) -> Tuning:  # type: ignore[override]
        return Tuning()

    def process(self, output: list[str]) -> Tuning:
        return read_tuning(self.sections(output))
