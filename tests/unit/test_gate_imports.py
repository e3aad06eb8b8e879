"""The launch gate stays clear of what it never needs: what `preflight` and `audit` import.

Each command runs in a fresh interpreter, as a launch script starts it, on a copy of the
shipped site; the nodes' answers are the facts of converged nodes, handed over by a stand-in
for the SSH round trip (no node, no network), so every step after gathering (judging,
deciding, printing) runs as it does on a fleet. The first run parses and validates the site
and keeps it (`model.cache`); the second, on the unchanged site, does not import the YAML
parser. Neither may import the apply engine, the pytest tier, rich, or any other command's
module (only the invoked command's parser is built).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import paramiko
import pytest
from test_audit_support import converged

from sparkbase.audit.expected import expected_for
from sparkbase.cli.main import COMMANDS as CLI_COMMANDS
from sparkbase.model import cache as site_cache
from sparkbase.model.site import load_site

LANE = "dsv41-flash"
#: never on the gate's path (the apply engine, the pytest tier, the terminal toolkit)
NEVER = ("pyinfra", "testinfra", "pytest", "_pytest", "rich")

#: run in the fresh interpreter: the round trip answered from a pickle, the CLI, the module set
RUNNER = """
import json, pickle, sys
import sparkbase.facts.collect as collect

def answered(targets, plans, parallel, gather=None):
    with open(sys.argv[1], "rb") as handle:
        return pickle.load(handle)

collect.gather_fleet = answered
from sparkbase.cli.main import main
try:
    code = main(sys.argv[3:])
except SystemExit as exc:
    code = exc.code
with open(sys.argv[2], "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""


@pytest.fixture
def gate_site(site_copy: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """The site, a lab directory holding a well-formed ssh_config and known_hosts (never
    connected to), and the converged facts of the lane's nodes, pickled."""
    lab = tmp_path / "lab"
    lab.mkdir()
    key = paramiko.ECDSAKey.generate()
    (lab / "ssh_config").write_text(
        "".join(f"Host spark{n}\n  HostName 127.0.0.1\n  Port {2700 + n}\n" for n in range(1, 5))
    )
    (lab / "known_hosts").write_text(
        "".join(f"[127.0.0.1]:{2700 + n} {key.get_name()} {key.get_base64()}\n" for n in range(1, 5))
    )
    site = load_site(site_copy)
    lane = site.lanes[LANE]
    facts = {node: converged(expected_for(site, node, lane.baseline)) for node in lane.nodes}
    answers = tmp_path / "facts.pickle"
    answers.write_bytes(pickle.dumps(facts))
    return site_copy, lab, answers


def _run(answers: Path, argv: list[str], tmp_path: Path, run: int) -> tuple[int, set[str]]:
    out = tmp_path / f"modules-{run}.json"
    env_python = [sys.executable, "-c", RUNNER, str(answers), str(out), *argv]
    env = {name: value for name, value in os.environ.items() if name != site_cache.DISABLE_ENV}
    subprocess.run(env_python, check=True, capture_output=True, timeout=120, env=env)
    result = json.loads(out.read_text())
    return int(result["code"]), set(result["modules"])


def _loaded(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


COMMANDS = {
    "preflight": ["preflight", LANE, "--before-launch"],  # the fake facts run no lane
    "audit": ["audit", "--format", "json", "--output", "/dev/null", "--limit", "spark1", "spark2",
              "spark3", "spark4"],
}


@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_the_gate_imports_only_what_it_needs(
    gate_site: tuple[Path, Path, Path], tmp_path: Path, command: list[str]
) -> None:
    site, lab, answers = gate_site
    argv = [*command, "--site", str(site), "--lab-dir", str(lab)]
    first_code, first = _run(answers, argv, tmp_path, 1)
    assert site_cache.cache_file(site.resolve()).is_file()
    second_code, second = _run(answers, argv, tmp_path, 2)
    assert first_code == second_code == 0  # converged nodes: qualified, clean
    assert "sparkbase.audit.run" in second and "paramiko" in second  # the whole path ran
    assert _loaded(first, ("ruamel.yaml", "jinja2", "pydantic")), "the first run parses, validates, renders"
    assert _loaded(second, ("ruamel.yaml",)) == [], "the unchanged site is read from the cache"
    assert _loaded(first | second, NEVER) == []
    others = tuple(f"sparkbase.cli.{module}" for name, (module, _) in CLI_COMMANDS.items()
                   if name != command[0])
    assert _loaded(first | second, (*others, "sparkbase.cli.deploying")) == []
