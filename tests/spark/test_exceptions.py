"""The spark package's errors: one root under DLSError, the builtins callers catch kept."""

from __future__ import annotations

import argparse

import pytest

from dls.exceptions import DLSError
from spark import batch_cli
from spark.exceptions import (
    AnalyzeError,
    FastPathError,
    JvmBuildError,
    SparkArgumentError,
    SparkJarsError,
    SparkJobError,
    WorkloadError,
)
from spark.workload import WorkloadSpec


@pytest.mark.parametrize(("cls", "builtin"), [
    (WorkloadError, ValueError), (AnalyzeError, ValueError),
    (SparkArgumentError, argparse.ArgumentTypeError), (SparkJarsError, RuntimeError),
    (JvmBuildError, RuntimeError), (FastPathError, RuntimeError)])
def test_every_error_is_a_spark_job_error_and_its_builtin(cls: type[Exception],
                                                          builtin: type[Exception]) -> None:
    err = cls("boom", field="f", value=3)
    assert isinstance(err, SparkJobError) and isinstance(err, DLSError)
    assert isinstance(err, builtin)
    assert str(err) == "boom" and err.field == "f" and err.value == 3


def test_a_bad_workload_parameter_is_a_spark_job_error() -> None:
    with pytest.raises(SparkJobError) as info:
        WorkloadSpec(d=0)
    assert info.value.field == "d"


def test_a_bad_sample_fraction_keeps_argparse_s_message(capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    parser = argparse.ArgumentParser(prog="dlsroute")
    batch_cli.register(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["analyze", "--space", "s.json", "--subscriptions", "x",
                           "--sample", "2"])
    assert "argument --sample: --sample must be in (0, 1], got 2" in capsys.readouterr().err
