"""``python -m dlsroute``."""

from dlsroute.cli import main

raise SystemExit(main())
