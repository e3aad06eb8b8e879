"""Each area's step kinds and the builder of its steps, one module per baseline section with
kinds of its own (`kernel`, `fabric`, `memory`, `secure_boot`, `host`, `cpuset`) and per
mechanism the sections share (`packages`, `files`, `dkms`, `units`, `activation`); a kind adds
the operation of `deploy/operations/` it is named after, imported only then (no pyinfra while
steps are built: `sparkbase.deploy.kinds`). `deploy.steps.build_steps` calls the builders in
the one order the deploy runs them.
"""
