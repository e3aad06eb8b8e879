"""Site policy: pure rules over the typed site, used by both `deploy/` and `audit/`.

Nothing here reaches a node or prints: other baselines' leftovers and what sparkbase may
retire (`foreign`, `ownership`), and the one override/decision log (`overrides`).
"""
