"""Errors of the Spark jobs: one root, :class:`SparkJobError`, under ``DLSError``.

Each class also inherits the builtin a caller would expect (``ValueError`` for a bad
argument, ``RuntimeError`` for a build or set-up that failed), so ``except ValueError``
keeps working. Errors about input carry the offending ``field`` and ``value``.
"""

from __future__ import annotations

import argparse

from dls.exceptions import DLSError

__all__ = [
    "AnalyzeError",
    "FastPathError",
    "JvmBuildError",
    "MappingArgumentError",
    "SparkArgumentError",
    "SparkJarsError",
    "SparkJobError",
    "WorkloadError",
]


class SparkJobError(DLSError):
    """Root of the errors of the ``spark`` package."""


class WorkloadError(SparkJobError, ValueError):
    """A workload parameter is invalid (the error names it and its value)."""


class MappingArgumentError(SparkJobError, ValueError):
    """An argument of the mapping job is invalid (the error names it and its value)."""


class AnalyzeError(SparkJobError, ValueError):
    """An analysis argument is invalid (the error names it and its value)."""


class SparkArgumentError(SparkJobError, argparse.ArgumentTypeError):
    """A command-line value that cannot be used (argparse shows its message as is)."""


class SparkJarsError(SparkJobError, RuntimeError):
    """The connector jars could not be fetched or do not fit the installed pyspark."""


class JvmBuildError(SparkJobError, RuntimeError):
    """The Java sources could not be compiled."""


class FastPathError(SparkJobError, RuntimeError):
    """The mapping's Java UDFs were asked for (``fast=True``) but cannot be used."""
