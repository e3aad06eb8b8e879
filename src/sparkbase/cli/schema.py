"""JSON Schema of baseline files (baselines/NAME.yaml) or lane files, for editors.

Fields a file inherits through `extends:` need not appear in it, so the schema requires
no field; unknown keys are still refused. To use it in VS Code (Red Hat YAML extension),
write it once and map it in .vscode/settings.json:

  sparkbase schema --output baselines/baseline.schema.json
  "yaml.schemas": {"./baselines/baseline.schema.json": ["baselines/*.yaml", "!baselines/site.yaml"]}

or put `# yaml-language-server: $schema=./baseline.schema.json` at the top of a baseline.
`--lane` gives the schema of lane files (lanes/NAME.yaml: the runtime block with its
container, image pinned by digest, endpoint and metrics); a lane inherits nothing, so its
required fields stay required:

  sparkbase schema --lane --output lanes/lane.schema.json
  "yaml.schemas": {"./lanes/lane.schema.json": ["lanes/*.yaml"]}
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sparkbase.atomicfile import write_output
from sparkbase.model.baseline import Baseline
from sparkbase.model.lanes import Lane


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`schema [--output F]`."""
    parser.add_argument("--output", "-o", type=Path, default=None, metavar="F",
                        help="write here (default: stdout)")
    parser.add_argument("--lane", action="store_true",
                        help="the schema of lane files (lanes/NAME.yaml) instead of baseline files")


def run(args: argparse.Namespace) -> int:
    """Print or write the schema; exit 0."""
    if args.lane:
        schema, kind = Lane.model_json_schema(), "lane"
    else:
        schema, kind = _without_required(Baseline.model_json_schema()), "baseline"
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "$id": f"https://sparkbase.invalid/schema/{kind}.json", **schema}
    text = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_output(args.output, text)
        print(f"sparkbase: wrote {args.output}", file=sys.stderr)
    return 0


def _without_required(value: Any) -> Any:
    """The schema with every `required` list dropped (extends supplies inherited fields)."""
    if isinstance(value, dict):
        return {key: _without_required(item) for key, item in value.items() if key != "required"}
    if isinstance(value, list):
        return [_without_required(item) for item in value]
    return value
