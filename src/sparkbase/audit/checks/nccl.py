"""NCCL checks: the library every lane loads and the rendered nccl.conf."""

from __future__ import annotations

from sparkbase.audit.checks.common import apply_fix
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, fail, node_check, ok, skip
from sparkbase.facts.model import NodeFacts
from sparkbase.facts.parsers import parse_kv_conf
from sparkbase.render import NCCL_CONF_PATH


@node_check("nccl.library", "nccl", "the NCCL library every lane loads has the pinned sha256")
def nccl_library(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    library = expected.baseline.nccl.library
    seen = facts.file_sha256.get(library.path)
    if seen != library.sha256:
        observed = f"sha256 {seen}" if seen else f"{library.path} missing"
        return fail(
            f"{library.path} sha256 {library.sha256}",
            observed,
            f"install {library.package}={library.version}: {apply_fix(expected)}",
        )
    return ok(library.sha256, seen)


@node_check("nccl.conf", "nccl", "/etc/nccl.conf is exactly the rendered settings")
def nccl_conf(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    rendered = expected.file(NCCL_CONF_PATH)
    if rendered is None:
        return skip("the baseline renders no nccl.conf")
    seen = facts.file_sha256.get(NCCL_CONF_PATH)
    if seen == rendered.sha256:
        return ok(rendered.sha256, seen)
    want = parse_kv_conf(rendered.content)
    if facts.nccl_conf is None:
        return fail(_env_text(want), f"{NCCL_CONF_PATH} missing", apply_fix(expected))
    have = parse_kv_conf(facts.nccl_conf)
    keys = [key for key in sorted(set(want) | set(have)) if want.get(key) != have.get(key)]
    if not keys:
        return fail(
            _env_text(want),
            "same settings, different file (comments or layout)",
            f"rewrite it: {apply_fix(expected)}",
        )
    return fail(
        "; ".join(f"{key}={want.get(key, '(unset)')}" for key in keys),
        "; ".join(f"{key}={have.get(key, '(unset)')}" for key in keys),
        f"rewrite it: {apply_fix(expected)}",
    )


def _env_text(env: dict[str, str]) -> str:
    return "; ".join(f"{key}={value}" for key, value in env.items())
