"""Debian packages: `dpkg-query -W` and `apt-mark showhold`."""

from __future__ import annotations

from sparkbase.facts.parsers.lines import node_lines


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
