"""NCCL checks: the library every lane loads and the rendered nccl.conf."""

from __future__ import annotations

from sparkbase.audit.checks.common import apply_fix, linked
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, Subject, fail, node_check, ok, skip
from sparkbase.facts.model import NodeFacts
from sparkbase.facts.parsers.nccl import parse_kv_conf, parse_nccl_conf
from sparkbase.render import NCCL_CONF_PATH


@node_check("nccl.library", "nccl", "the NCCL library every lane loads has the pinned sha256",
            section="nccl")
def nccl_library(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    library = expected.baseline.nccl.library
    if library.path is None or library.sha256 is None:
        version = f"NCCL {library.version}" if library.version else "its NCCL"
        return skip(f"no host library: {version} is built into the lane's image (provided_by: image); "
                    "each lane's runtime.nccl_library check reads what its processes map")
    seen = facts.file_sha256.get(library.path)
    if seen != library.sha256:
        observed = f"sha256 {seen}" if seen else f"{library.path} missing"
        if library.package is None:  # the site's own file: sparkbase never installs it
            fix = (f"the site provides this file (provided_by: site): put the library with sha256 "
                   f"{library.sha256} back at {library.path}, or record the one it has in the baseline")
        else:
            fix = f"install {library.package}={library.version}: {apply_fix(at)}"
        return fail(f"{library.path} sha256 {library.sha256}", observed, fix)
    return ok(library.sha256, seen)


@node_check("nccl.conf", "nccl", "/etc/nccl.conf is exactly the rendered settings", section="nccl",
            written=True)
def nccl_conf(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    rendered = expected.file(NCCL_CONF_PATH)
    if rendered is None:
        return skip("the baseline renders no nccl.conf")
    want = parse_kv_conf(rendered.content)
    link = linked(facts, NCCL_CONF_PATH, _env_text(want))
    if link is not None:
        return link
    seen = facts.file_sha256.get(NCCL_CONF_PATH)
    if seen == rendered.sha256:
        return ok(rendered.sha256, seen)
    if facts.nccl_conf is None:
        return fail(_env_text(want), f"{NCCL_CONF_PATH} missing", apply_fix(at))
    have = _as_nccl_reads(facts.nccl_conf)
    keys = [key for key in sorted(set(want) | set(have)) if want.get(key) != have.get(key)]
    if not keys:
        return fail(
            _env_text(want),
            "same settings, different file (comments or layout)",
            f"rewrite it: {apply_fix(at)}",
        )
    return fail(
        "; ".join(f"{key}={want.get(key, '(unset)')}" for key in keys),
        "; ".join(f"{key!r}={have[key]!r}" if key != key.strip() else f"{key}={have.get(key, '(unset)')}"
                  for key in keys) + " (as NCCL reads the file: the first line of a key wins)",
        f"rewrite it: {apply_fix(at)}",
    )


def _as_nccl_reads(text: str) -> dict[str, str]:
    """Each name the file sets and the value NCCL takes for it (`parse_nccl_conf`)."""
    conf = parse_nccl_conf(text)
    return {a.name: value for a in conf.assignments if (value := conf.value(a.name)) is not None}


def _env_text(env: dict[str, str]) -> str:
    return "; ".join(f"{key}={value}" for key, value in env.items())
