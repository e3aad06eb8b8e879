"""The gate: lane pre-flight (`preflight`), its override log (`overrides`), re-open triggers."""
