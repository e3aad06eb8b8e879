"""sparkbase: keep a small fleet of DGX Spark machines on one declared, typed host baseline."""

__version__ = "0.7.0"
