"""The emulated fleet ("the lab"): DGX Spark nodes on one Linux machine.

See `docs/emulation.md` for the contract and `README.md` in this folder for what is
emulated and how. The entry points are `sparkbase_lab.fleet.Lab` and
`sparkbase_lab.faults`.
"""
