"""A probe of how plan and apply read a node's facts (run as its own process: pyinfra patches
the interpreter with gevent). Used by test_fact_batch_e2e.py and by the measurements.

    python fact_probe.py count OUT.json [--no-memo] -- SPARKBASE-ARGS...
        run the sparkbase CLI in this process, counting every SSH command pyinfra runs on
        each node (`Host.run_shell_command`: facts, locks, drains); --no-memo plans without
        the fact memo (every fact its own round trip, as before it). OUT.json: node -> count.

    python fact_probe.py compare OUT.json SITE LAB BASELINE NODE...
        for each node (moved to BASELINE for the run unless it is "-"): every fact a prepare
        of its steps reads, asked in one batch and one by one; OUT.json: node -> {"asks",
        "unanswered", "mismatches"}.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def count(out: Path, no_memo: bool, argv: list[str]) -> int:
    from sparkbase.deploy.session import patch_gevent

    patch_gevent()
    from pyinfra.api.host import Host

    from sparkbase.cli.main import main
    from sparkbase.deploy import fact_memo

    counts: Counter[str] = Counter()
    original = Host.run_shell_command

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts[self.name] += 1
        return original(self, *args, **kwargs)

    Host.run_shell_command = counted  # type: ignore[method-assign]
    if no_memo:
        @contextlib.contextmanager
        def no_scope(prefetch: Any = ()) -> Iterator[fact_memo.MemoStats]:
            yield fact_memo.MemoStats()

        fact_memo.fact_scope = no_scope
    try:
        return main(argv)
    finally:
        out.write_text(json.dumps(dict(counts)))


def compare(out: Path, site_dir: Path, lab: Path, baseline: str, nodes: list[str]) -> int:
    from sparkbase.deploy.session import patch_gevent

    patch_gevent()
    from pyinfra.context import ctx_host, ctx_state

    from sparkbase.deploy.assign import with_assignment
    from sparkbase.deploy.fact_memo import read_batch
    from sparkbase.deploy.locks import Owner
    from sparkbase.deploy.mok_keys import mok_dir_from_env
    from sparkbase.deploy.pyinfra_deploy import asks_for
    from sparkbase.deploy.session import Options, Session
    from sparkbase.deploy.steps import build_steps
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
            asks = list({ask.key(): ask for ask in asks_for(build_steps(site, node, mok))}.values())
            host = session.host(node)
            with ctx_state.use(session.state), ctx_host.use(host):
                batch = read_batch(asks)
                mismatches = []
                for ask in asks:
                    # a fenced fact reads its marker from stdin: alone, it is a batch of one
                    fenced = getattr(ask.cls, "fence_on_stdin", False)
                    alone = (read_batch([ask]).values.get(ask.key()) if fenced
                             else host.get_fact(ask.cls, **dict(ask.kwargs)))
                    if ask.key() in batch.values and batch.values[ask.key()] != alone:
                        mismatches.append(f"{ask.cls.__name__}{dict(ask.kwargs)}: batch "
                                          f"{batch.values[ask.key()]!r} alone {alone!r}")
            found[node] = {"asks": len(asks), "unanswered": {repr(k): v for k, v in batch.unanswered.items()},
                           "mismatches": mismatches}
    finally:
        session.disconnect()
    out.write_text(json.dumps(found))
    return 0


if __name__ == "__main__":
    what, target, *rest = sys.argv[1:]
    if what == "count":
        split = rest.index("--")
        sys.exit(count(Path(target), "--no-memo" in rest[:split], rest[split + 1 :]))
    sys.exit(compare(Path(target), Path(rest[0]), Path(rest[1]), rest[2], rest[3:]))
