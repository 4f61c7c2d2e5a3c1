"""`python -m fedbench`: the same command line as the `fedbench` script."""

from fedbench.cli import entry

entry()
