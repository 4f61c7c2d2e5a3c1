"""`python -m fedbench`: the same command line as the `fedbench` script."""

import sys

from fedbench.cli import main

sys.exit(main())
