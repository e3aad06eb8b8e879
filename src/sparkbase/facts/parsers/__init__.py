"""What a node is asked and how its answers read, one module per area: each baseline section
(`kernel.py` … `cpuset.py`) and each shared mechanism (units, packages, modules, files, the
deploy's reads, ownership, the OS image, Docker, serving processes). An area's module holds its
fact script sections (in the order `facts/areas.py` lists), its pure parsers (text in, one typed
value out, `ValueError` on text they cannot read; real samples in `tests/fixtures/real/`), and
`facts`, which turns its sections into `NodeFacts` fields (`facts/assemble.py`).
"""
