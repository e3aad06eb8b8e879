"""pyinfra operations sparkbase needs beyond pyinfra's own: one module per baseline section
(`model/sections.py`: `kernel.py`, `fabric.py`, `memory.py`, `secure_boot.py`, `host.py`) and
one per mechanism the sections share (`base.py`, `files.py`, `packages.py`, `dkms.py`,
`units.py`, `activation.py`, `record.py`); the step kind that adds each is its area's, in
`deploy/areas/`.

Each reads facts, compares with what the baseline wants, then yields commands, or records
a no-op with its reason. Commands are built from quoted arguments. Follow-up operations
(`activation`) take their file step's `OperationMeta` (`trigger`) and act when it changes
or when the node's state shows the file has not taken effect.
"""
