"""Rules on what a baseline renders: free-form entries never contradict a typed field.

The contract and the other rules read typed fields; these rules make sure the rendered
result says the same thing. A free-form kernel argument may not set a parameter a typed
field decides, nor set one parameter twice, nor forbid what a typed field renders; a
huge page size must exist for the base page size; the command line must fit the
kernel's; a package pinned in `host.packages` may not re-pin one a typed field pins; a
unit the baseline needs may not also be disabled. (`nccl.settings.extra` cannot name a
typed NCCL key: the model refuses that itself.)
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkbase.model.baseline import Baseline
from sparkbase.model.cmdline import (
    ALWAYS,
    COMMAND_LINE_SIZE,
    GRUB_RESERVE,
    HUGE_PAGE_PARAMETERS,
    HUGE_PAGE_SIZES,
    parameter_name,
    rendered_kernel_args,
    typed_parameters,
)
from sparkbase.model.findings import DocRef, Finding
from sparkbase.model.yamlio import dotted


def rendered_findings(doc: DocRef, baseline: Baseline) -> Iterator[Finding]:
    """Every way a free-form entry of `baseline` contradicts what its typed fields render."""
    yield from _cmdline_add_findings(doc, baseline)
    yield from _cmdline_length_findings(doc, baseline)
    yield from _cmdline_forbid_findings(doc, baseline)
    yield from _package_findings(doc, baseline)
    yield from _service_findings(doc, baseline)


def _cmdline_add_findings(doc: DocRef, baseline: Baseline) -> Iterator[Finding]:
    typed = {parameter.name: parameter for parameter in typed_parameters(baseline)}
    seen: dict[str, str] = {}
    page_size = baseline.kernel.page_size
    for index, arg in enumerate(baseline.kernel.cmdline_add):
        path = ("kernel", "cmdline_add", index)
        name = parameter_name(arg)
        parameter = typed.get(name)
        if parameter is not None:
            rendered = (
                f"renders '{parameter.rendered}' from it"
                if parameter.rendered
                else "applies that field itself"
            )
            yield Finding(
                doc,
                path,
                f"'{arg}' contradicts {dotted(parameter.field)}, which decides {name} "
                f"(sparkbase {rendered}): change that field instead",
            )
        if name in seen:
            yield Finding(
                doc,
                path,
                f"'{arg}' sets {name} again (also '{seen[name]}'): the kernel keeps only one; "
                "give each parameter once",
            )
        seen.setdefault(name, arg)
        _, equals, value = arg.partition("=")
        allowed = HUGE_PAGE_SIZES[page_size]
        if name in HUGE_PAGE_PARAMETERS and equals and value not in allowed:
            yield Finding(
                doc,
                path,
                f"huge page size {value} does not exist with {page_size // 1024} KiB pages "
                f"(kernel.page_size); arm64 offers {', '.join(sorted(allowed))}",
            )


def _cmdline_length_findings(doc: DocRef, baseline: Baseline) -> Iterator[Finding]:
    length = len(" ".join(rendered_kernel_args(baseline)))
    budget = COMMAND_LINE_SIZE - GRUB_RESERVE
    if length > budget:
        yield Finding(
            doc,
            ("kernel", "cmdline_add"),
            f"the rendered command line is {length} bytes; the arm64 kernel keeps "
            f"{COMMAND_LINE_SIZE}, of which sparkbase may use {budget} (GRUB needs the rest): "
            "the end would be cut off",
        )


def _cmdline_forbid_findings(doc: DocRef, baseline: Baseline) -> Iterator[Finding]:
    rendered = {
        parameter.rendered: parameter.field
        for parameter in typed_parameters(baseline)
        if parameter.rendered is not None
    }
    for index, arg in enumerate(baseline.kernel.cmdline_forbid):
        for text, field in [*rendered.items(), *[(always, None) for always in ALWAYS]]:
            if arg == text or ("=" not in arg and parameter_name(arg) == parameter_name(text)):
                source = f"{dotted(field)} renders it" if field else "sparkbase always renders it"
                yield Finding(
                    doc,
                    ("kernel", "cmdline_forbid", index),
                    f"'{arg}' forbids '{text}', but {source}: the two would contradict",
                )


def _package_findings(doc: DocRef, baseline: Baseline) -> Iterator[Finding]:
    own = baseline.host.packages
    pins = baseline.packages()  # the typed fields' pins, then host.packages last
    typed = {pin.name: pin.version for pin in pins[: len(pins) - len(own)]}
    seen: set[str] = set()
    for index, pin in enumerate(own):
        path = ("host", "packages", index, "name")
        if pin.name in typed:
            yield Finding(
                doc,
                path,
                f"{pin.name} is already pinned at {typed[pin.name]} by the baseline's typed fields "
                "(kernel, driver, NCCL, fan control or memory saver): remove it here",
            )
        elif pin.name in seen:
            yield Finding(doc, path, f"{pin.name} is pinned twice")
        seen.add(pin.name)


def _service_findings(doc: DocRef, baseline: Baseline) -> Iterator[Finding]:
    fan = baseline.host.fan_control
    if fan is None:
        return
    for index, unit in enumerate(baseline.host.disable_services):
        if unit == fan.service:
            yield Finding(
                doc,
                ("host", "disable_services", index),
                f"{unit} is the fan-control service host.fan_control.service needs enabled",
            )
