"""The gate: lane pre-flight (`preflight`), the proxy's `.env` (`proxy_env`) and the switch
that rewrites it under its locks (`switch`), re-open triggers (the override log is
`sparkbase.policy.overrides`)."""
