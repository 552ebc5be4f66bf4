"""`python -m kvtier ...`: the `kvtier` command where its console script is not installed."""

import sys

from .cli import main

sys.exit(main())
