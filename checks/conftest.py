"""`pytest checks/ --hosts=paramiko://spark1,... --ssh-config=FILE [--sparkbase-site DIR]`:
the sparkbase checks, from the pytest plugin `sparkbase.checks_plugin` (installed as a
`pytest11` entry point; loaded here by name too, so a checkout without it installed works).
The site defaults to $SPARKBASE_SITE, else here. See the plugin's docstring."""

from __future__ import annotations

import pytest

pytest_plugins = ["sparkbase.checks_plugin"]


def pytest_configure(config: pytest.Config) -> None:
    """Switch the checks on: this directory is where the repository runs them."""
    from sparkbase.checks_plugin import enable

    enable(config)
