"""Node-side commands of the emulated fleet (copied into each node)."""
