"""What a node is: a one-round-trip fact script, pure parsers, typed `NodeFacts`.

`script` builds the script from a `FactPlan` (what the baseline needs read), `parsers`
read each command's output, `assemble` builds `NodeFacts`, and `collect` runs it over
strict-host-key SSH on many nodes at once.
"""
