"""NCCL's `KEY=value` config files: /etc/nccl.conf, ~/.nccl.conf, $NCCL_CONF_FILE.

Reads text only and knows no fact type, so the serving-process values (`facts/runtime.py`),
which `facts/model.py` holds, can use it without the model importing itself back.
"""

from __future__ import annotations

from sparkbase.facts.parsers.lines import node_lines


def parse_kv_conf(text: str) -> dict[str, str]:
    """`KEY=value` lines (nccl.conf): comments and blanks ignored, a later key wins."""
    values: dict[str, str] = {}
    for line in node_lines(text):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values
