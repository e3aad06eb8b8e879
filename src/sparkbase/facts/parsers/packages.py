"""Debian packages: `dpkg-query -W` and `apt-mark showhold`."""

from __future__ import annotations

from typing import Any

from sparkbase.facts.parsers.lines import node_lines
from sparkbase.facts.script import FactPlan, Read, Reader, cmd

DPKG_FORMAT = "${Package}\t${Version}\t${db:Status-Abbrev}\n"


def parse_dpkg_query(text: str) -> dict[str, str]:
    """`dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n' P…` → installed versions.

    The status abbreviation is want/state/error (`ii `, held `hi `): installed means state
    `i`. Packages dpkg knows but has removed (`rc`, `un`) do not count; names it has never
    heard of only appear on stderr.
    """
    installed: dict[str, str] = {}
    for line in node_lines(text):
        parts = line.split("\t")
        if len(parts) == 3 and parts[2][1:2] == "i":
            installed[parts[0]] = parts[1]
    return installed


def parse_showhold(text: str) -> list[str]:
    """`apt-mark showhold` → held package names, sorted."""
    return sorted(line.strip() for line in node_lines(text) if line.strip())


def sections(plan: FactPlan) -> list[Read]:
    """The installed version of each package the plan names."""
    return [("dpkg", cmd("dpkg-query", "-W", f"-f={DPKG_FORMAT}", *plan.packages))] if plan.packages else []


def facts(r: Reader, plan: FactPlan) -> dict[str, Any]:
    """The packages' `NodeFacts` field, whatever dpkg-query's status (an unknown package fails it)."""
    dpkg = r.sections.get("dpkg")
    return {"packages": parse_dpkg_query(dpkg.output) if dpkg is not None else {}}
