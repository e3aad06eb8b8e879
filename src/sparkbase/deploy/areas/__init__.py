"""Each area's step kinds beside the builder of its steps: one module per baseline section
with kinds of its own and per mechanism the sections share (`sparkbase.deploy.kinds`)."""
