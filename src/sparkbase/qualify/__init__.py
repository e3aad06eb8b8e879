"""The release gate (`sparkbase qualify`): determinism hashes, the A/B/A comparison, and the
frozen records of each qualified release."""
