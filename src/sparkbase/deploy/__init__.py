"""Converge nodes to their baselines with pyinfra, safely around reboots.

The pipeline, one module per room:

- `steps`: a node's baseline and rendered files -> the ordered list of `Step`s (pure data,
  no pyinfra): what the deploy must ensure, in order.
- `sparkbase.policy.foreign` / `sparkbase.policy.ownership` (site policy, shared with the
  audit): what the site's other baselines put on a node and its own does not, and which
  of it sparkbase recorded creating: the steps retire only that, the audit warns.
- `facts`: pyinfra facts (a command plus a pure `process` parser) that read a node.
- `operations`: pyinfra operations (read facts, compare, yield commands or a no-op reason).
- `pyinfra_deploy`: turns `Step`s into operation calls for the host in context; shared by
  the native deploy (`deploys/baseline.py`) and sparkbase's in-process runner.
- `reboot`: why a node needs a reboot, and whether it came back right.
- `runner`: plan/apply orchestration over pyinfra's API: locks, serial reboot rollout.
- `locks`, `assign`, `results`: the small pieces around it (the override log is
  `sparkbase.policy.overrides`, shared with the gate).
"""
