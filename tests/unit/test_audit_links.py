"""The audit never reads through a link where sparkbase writes a file: the node's link section
names it, its hash and text are left out, and the file's check fails naming the link, never
showing what it points to (issue 20: `/etc/nccl.conf -> /root/.env` printed its values)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

from test_audit_support import converged_node, shipped

from sparkbase.audit.run import judge_node
from sparkbase.facts.areas import plan_for
from sparkbase.facts.assemble import assemble
from sparkbase.facts.parsers.files import LINKS_SECTION, links_command, parse_links, written_paths
from sparkbase.facts.script import Section, Sections
from sparkbase.render import NCCL_CONF_PATH, node_files

SITE = shipped()


def test_the_link_section_names_links_only(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    os.symlink("/etc/shadow", tmp_path / "link")
    paths = [str(tmp_path / name) for name in ("file", "link", "missing")]
    run = subprocess.run(["sh", "-c", links_command(paths)], capture_output=True, text=True, check=True)
    assert parse_links(run.stdout) == {str(tmp_path / "link"): "/etc/shadow"}


def test_the_plan_checks_every_written_file_but_the_library() -> None:
    baseline = SITE.baseline_of("spark1")
    files = [f.path for f in node_files(SITE, "spark1")]
    plan = plan_for(baseline, files, "/etc/sparkbase/stamp.json")
    written = written_paths(plan)
    assert NCCL_CONF_PATH in written and "/etc/sparkbase/stamp.json" in written
    assert baseline.nccl.library.path not in written


def test_a_linked_file_is_never_judged_by_what_it_points_to() -> None:
    expected, facts = converged_node(SITE)
    secret = "AWS_SECRET_ACCESS_KEY=hunter2"
    linked = replace(facts, links={NCCL_CONF_PATH: "/root/.aws/credentials"}, nccl_conf=secret,
                     file_sha256={**facts.file_sha256, NCCL_CONF_PATH: None})
    result = next(r for r in judge_node(expected, linked) if r.id == "nccl.conf")
    assert result.status == "fail"
    assert "a symbolic link to '/root/.aws/credentials'" in (result.observed or "")
    assert "hunter2" not in repr(result)


def test_assembly_leaves_out_a_linked_files_hash_and_text() -> None:
    baseline = SITE.baseline_of("spark1")
    plan = plan_for(baseline, [NCCL_CONF_PATH], "/etc/sparkbase/stamp.json")
    sections = Sections({
        LINKS_SECTION: Section(f"{NCCL_CONF_PATH}\t/root/.env\n", 0),
        "nccl-conf": Section("TOKEN=hunter2\n", 0),
        "sha256": Section("a" * 64 + f"  {NCCL_CONF_PATH}\n", 0),
    })
    facts = assemble("spark1", plan, sections)
    assert facts.links == {NCCL_CONF_PATH: "/root/.env"}
    assert facts.nccl_conf is None
    assert facts.file_sha256[NCCL_CONF_PATH] is None
