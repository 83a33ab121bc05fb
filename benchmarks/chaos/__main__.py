"""``python -m benchmarks.chaos``: see :mod:`benchmarks.chaos.run`."""

import sys

from benchmarks.chaos.run import main

sys.exit(main())
