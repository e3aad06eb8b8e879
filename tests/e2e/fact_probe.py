"""A probe of how plan and apply read a node's facts (run as its own process: pyinfra patches
the interpreter with gevent). Used by test_fact_read_e2e.py and by the measurements.

    python fact_probe.py count OUT.json -- SPARKBASE-ARGS...
        run the sparkbase CLI in this process, counting every SSH command pyinfra runs on
        each node (`Host.run_shell_command`: facts, locks, drains). OUT.json: node -> count.

    python fact_probe.py compare OUT.json SITE LAB BASELINE NODE...
        for each node (moved to BASELINE for the run unless it is "-"): the facts a prepare of
        its steps reads, read over pyinfra (plan's way) and by the audit's own SSH client;
        OUT.json: node -> {"sections", "errors", "differences"}.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

#: fields that are a reading of the moment, not of the node's state
MOMENTARY = {"elapsed_seconds", "gpu"}


def count(out: Path, argv: list[str]) -> int:
    from sparkbase.deploy.session import patch_gevent

    patch_gevent()
    from pyinfra.api.host import Host

    from sparkbase.cli.main import main

    counts: Counter[str] = Counter()
    original = Host.run_shell_command

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts[self.name] += 1
        return original(self, *args, **kwargs)

    Host.run_shell_command = counted  # type: ignore[method-assign]
    try:
        return main(argv)
    finally:
        out.write_text(json.dumps(dict(counts)))


def compare(out: Path, site_dir: Path, lab: Path, baseline: str, nodes: list[str]) -> int:
    from sparkbase.deploy.session import patch_gevent

    patch_gevent()
    from pyinfra.context import ctx_host, ctx_state

    from sparkbase.deploy.assign import with_assignment
    from sparkbase.deploy.locks import Owner
    from sparkbase.deploy.mok_keys import mok_dir_from_env
    from sparkbase.deploy.node import read_node
    from sparkbase.deploy.reads import fact_plan
    from sparkbase.deploy.session import Options, Session
    from sparkbase.deploy.steps import build_steps
    from sparkbase.facts.areas import section_names
    from sparkbase.facts.collect import gather_node
    from sparkbase.facts.model import NodeFacts
    from sparkbase.model.site import load_site

    site = load_site(site_dir)
    if baseline != "-":
        site = with_assignment(site, nodes, baseline)
    mok = mok_dir_from_env(lab)
    session = Session(site, nodes, Options(lab=lab, progress=lambda line: None), Owner())
    found: dict[str, Any] = {}
    try:
        down = session.connect()
        assert not down, f"unreachable: {down}"
        for node in nodes:
            plan = fact_plan(build_steps(site, node, mok))
            with ctx_state.use(session.state), ctx_host.use(session.host(node)):
                deploy = read_node(plan)
            audit = gather_node(node, session.targets[node], plan)
            assert isinstance(audit, NodeFacts), audit
            differences = [field.name for field in dataclasses.fields(NodeFacts)
                           if field.name not in MOMENTARY
                           and getattr(deploy, field.name) != getattr(audit, field.name)]
            found[node] = {"sections": len(section_names(plan)), "errors": sorted(deploy.errors),
                           "differences": differences}
    finally:
        session.disconnect()
    out.write_text(json.dumps(found))
    return 0


if __name__ == "__main__":
    what, target, *rest = sys.argv[1:]
    if what == "count":
        sys.exit(count(Path(target), rest[rest.index("--") + 1 :]))
    sys.exit(compare(Path(target), Path(rest[0]), Path(rest[1]), rest[2], rest[3:]))
