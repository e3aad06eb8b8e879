"""Compare what nodes are (facts) with what they should be (baseline, rendered files).

`registry` holds every check once, `checks` defines them, `expected` builds each node's
expectations, `run` gathers and judges, `reports` prints table/JSON/JUnit/Prometheus.
"""
