"""`nvme get-feature DEV -f ID`: the current value of one NVMe feature."""

from __future__ import annotations

import re

from sparkbase.facts.parsers.lines import node_lines

#: nvme-cli prints `get-feature:%#0*x (%s), %s value:%#0*x` (nvme.c get_feature_id_print;
#: nvme-print-stdout.c stdout_feature_show): C's `#` flag adds no `0x` to zero, so a zero
#: value prints as `00000000` and any other as `0x00000107` (both hexadecimal)
_FEATURE_LINE = re.compile(
    r"^get-feature:\s*(?P<fid>0x[0-9a-fA-F]+|0+)\s*\((?P<name>[^)]*)\),\s*(?P<sel>\w+) value:\s*"
    r"(?P<value>(?:0x)?[0-9a-fA-F]+)\s*$"
)


def parse_nvme_feature(text: str, feature: int | None = None) -> int:
    """The current value of the feature `nvme get-feature` printed (of `feature`, when given).

    Raises ValueError on anything else (`NVMe status: …`, a missing device, another feature).
    """
    for line in node_lines(text):
        match = _FEATURE_LINE.match(line.strip())
        if match is None:
            continue
        fid = int(match["fid"], 16)
        if feature is not None and fid != feature:
            raise ValueError(f"nvme printed feature {fid:#04x}, not {feature:#04x}")
        if match["sel"] != "Current":
            raise ValueError(f"nvme printed the {match['sel']} value, not the current one")
        return int(match["value"], 16)
    first = next((line.strip() for line in node_lines(text) if line.strip()), "(no output)")
    raise ValueError(f"not a get-feature answer: {first[:120]}")
