"""Typed site model: baselines, site contract and triggers, inventory, lanes; and loading them."""
