"""`python -m fedbench`: the same command line as the `fedbench` script."""

from fedbench.command import entry

entry()
