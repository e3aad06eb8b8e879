"""The sparkbase command line: a thin layer over the importable API."""
