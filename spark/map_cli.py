"""Subcommands of the ``dlsroute`` command for the Spark streaming mapping job (spark-map)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add this module's subcommands to the ``dlsroute`` subparsers ``sub``."""
    del sub
    _ = argparse
