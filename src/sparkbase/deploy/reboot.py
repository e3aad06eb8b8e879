"""Why a node needs a reboot, and whether it came back as its baseline says.

Pure functions over the boot and MOK state (`node.boot_state`, `node.mok_state`) and the steps that
will change, so a staged change is still reported as pending on the next run: the reasons
come from what the node runs and what an earlier apply staged for the next boot (noted in
/run before the staging steps run, so the reboot clears it), not only from what this run
touched.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Any, Protocol

from sparkbase.model.baseline import Baseline
from sparkbase.model.cmdline import rendered_kernel_args
from sparkbase.policy.mok import PendingEnrolment, pending_enrolment

#: what an apply has staged for the next boot (step names, one a line): written before it
#: runs a step that acts only after a reboot, in /run so that the reboot itself clears it
STAGED_PATH = "/run/sparkbase/reboot-staged"


class Change(Protocol):
    """What this module reads of a step that will change a node: a `steps.Step`, not imported
    here (steps -> kinds -> operations -> facts -> `STAGED_PATH` here would be a cycle)."""

    @property
    def name(self) -> str: ...

    @property
    def reboot(self) -> bool: ...


def _flag(value: bool) -> str:
    return "Y" if value else "N"


def boot_mismatches(baseline: Baseline, boot: dict[str, Any]) -> list[str]:
    """How the running system differs from what the baseline boots (empty when it matches).

    This is the post-reboot verification: kernel release, page size, command line (none
    when the baseline leaves the kernel as found: no apply changes what it boots).
    """
    if not baseline.manages("kernel"):
        return []
    problems = []
    kernel = baseline.kernel
    if boot["kernel"] != kernel.release:
        problems.append(f"running kernel {boot['kernel'] or '?'}, baseline wants {kernel.release}")
    if boot["page_size"] != kernel.page_size:
        problems.append(f"page size {boot['page_size']}, baseline wants {kernel.page_size}")
    cmdline = boot["cmdline"]
    missing = [arg for arg in rendered_kernel_args(baseline) if arg not in cmdline]
    if missing:
        problems.append(f"/proc/cmdline lacks {' '.join(missing)}")
    forbidden = set(kernel.cmdline_forbid)
    bad = [arg for arg in cmdline if arg in forbidden or arg.split("=")[0] in forbidden]
    if bad:
        problems.append(f"/proc/cmdline carries forbidden {' '.join(bad)}")
    return problems


def mok_enrolment(baseline: Baseline, mok: dict[str, Any], signing: str | None) -> PendingEnrolment | None:
    """The enrolment of the key the baseline's modules are signed with (`signing`), when it
    is imported and waits for a person at the console (`policy.mok`); None otherwise."""
    if not baseline.dkms_builds():
        return None
    return pending_enrolment(signing, mok.get("enrolled", []), mok.get("pending", []))


def module_mismatches(baseline: Baseline, boot: dict[str, Any], mok: dict[str, Any],
                      signing: str | None = None) -> list[str]:
    """Module state that only a reboot fixes: nvidia-drm parameters, the memory-saver and
    fan-control modules; each only where the baseline manages its section (a reboot
    changes nothing sparkbase left as found). While the key they are signed with
    (`signing`) waits for its enrolment at the console, the signed modules are not expected
    to load: a reboot alone does not load them (`mok_enrolment` reports that state)."""
    problems = []
    signed_pending = mok_enrolment(baseline, mok, signing) is not None
    drm = baseline.host.nvidia_drm
    host = baseline.manages("host")
    if host and "nvidia_drm" in boot["modules"]:
        for key, wanted in (("modeset", drm.modeset), ("fbdev", drm.fbdev)):
            live = boot[f"drm_{key}"]
            if live and live != _flag(wanted):
                problems.append(f"nvidia_drm {key}={live} loaded, baseline wants {_flag(wanted)}")
    saver = baseline.memory.memory_saver
    memory = baseline.manages("memory")
    if memory and saver is not None and saver.required and saver.module not in boot["modules"] \
            and not signed_pending:
        problems.append(f"{saver.module} is not loaded")
    fan = baseline.host.fan_control
    if host and fan is not None and fan.module not in boot["modules"] and not signed_pending:
        problems.append(f"{fan.module} is not loaded")
    return problems


def reboot_reasons(
    baseline: Baseline, boot: dict[str, Any], mok: dict[str, Any], changing: Iterable[Change],
    signing: str | None = None,
) -> list[str]:
    """Every reason the node needs a reboot to run its baseline (empty: no reboot): what it
    runs against the baseline, what an earlier apply staged and no reboot has loaded yet
    (a run that died between staging and rebooting), and what this run will stage."""
    reasons = boot_mismatches(baseline, boot)
    reasons += module_mismatches(baseline, boot, mok, signing)
    reasons += [f"staged by an earlier apply, not booted yet: {what}" for what in boot.get("staged", [])]
    for step in changing:
        if step.reboot:
            reasons.append(f"{step.name} changes")
    return list(dict.fromkeys(reasons))


def staged(changing: Iterable[Change]) -> list[str]:
    """What running `changing` stages for the next boot: the steps that act after a reboot."""
    return [step.name for step in changing if step.reboot]


def stage_command(names: list[str]) -> str:
    """Note `names` as staged for the next boot (appended: an earlier staged reboot still
    counts); /run is cleared by the reboot that loads them."""
    lines = " ".join(shlex.quote(name) for name in names)
    directory = shlex.quote(STAGED_PATH.rsplit("/", 1)[0])
    return f"mkdir -p {directory} && printf '%s\\n' {lines} >> {shlex.quote(STAGED_PATH)}"
