"""Why a lane may not launch, from its qualification: what runs matches none of its releases.

A lane's qualified releases are frozen in `releases/<lane>/<release>/` by `sparkbase qualify`
(`gate.records`). Once a lane has at least one, the gate refuses it unless what runs now
matches one of them: the baseline's render hash (what the lane's baseline puts on a host;
each node's stamp carries it and the audit's stamp check holds the nodes to it), the image
digest (when the lane runs as a container) and the lane's settings. The refusal names what
differs from the newest release, and `--override REASON` launches anyway, recorded in the
one decision log like every other override.

Why only once a lane has a release, and not from the first day: the site runs its lanes
already (issue 21: sparkbase takes over a fleet as it runs), and qualifying measures the
lane itself, so a lane's first release is necessarily taken of a lane that runs unqualified.
Refusing every lane until each has a release would stop production the day sparkbase is
upgraded; a site with no `releases/` directory keeps exactly the gate it had. Recording a
lane's first release is the site's act of putting that lane under the gate, lane by lane;
`lock --check` lists the lanes that are not under it yet. A site that wants the stricter
rule (no release, no launch) would add a switch in site.yaml; that decision is the site's.
"""

from __future__ import annotations

from sparkbase.gate.records import RecordError, list_releases, shape_of
from sparkbase.gate.refusals import Refusal
from sparkbase.model.site import Site


def release_refusals(site: Site, name: str) -> list[Refusal]:
    """The qualification refusal of lane `name` of `site` (none without releases, or when
    what runs matches one); a record that cannot be read refuses, naming it."""
    try:
        found = list_releases(site.root, name)
    except RecordError as exc:
        return [Refusal("lane", f"qualification: {exc}")]
    if not found or site.lanes[name].baseline not in site.baselines:
        return []
    shape = shape_of(site, name)
    if any(shape.matches(release.shape) for release in found):
        return []
    newest = found[-1]
    differs = "; ".join(shape.differences(newest.shape, newest.name))
    return [Refusal("lane", f"qualification: what runs matches none of the {len(found)} qualified release(s) "
                            f"in releases/{name}/; against the newest, {newest.name}: {differs} "
                            f"(`sparkbase qualify {name}` qualifies it)")]
