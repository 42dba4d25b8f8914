"""Onceflow's refusals raised in a Spark task reach the driver as text only; their error class
makes them typed again there (onceflow.staging.task_errors), without matching any message."""

from __future__ import annotations

import traceback

import pytest
from onceflow.errors import AbandonedTxidError, FencedAttemptError, TransformError
from onceflow.staging.task_errors import for_driver, task_refusal

pytestmark = pytest.mark.unit


def as_the_driver_sees_it(error: BaseException) -> RuntimeError:
    """A failed job as py4j hands it to the driver: the worker's formatted traceback among
    the JVM's text (pyspark.util.handle_worker_exception)."""
    try:
        raise error
    except BaseException as e:
        worker = "".join(traceback.format_exception(e))
    return RuntimeError(
        "An error occurred while calling o80.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 3 in stage "
        "1.0 failed 1 times, most recent failure: Lost task 3.0 (TID 7): "
        f"org.apache.spark.api.python.PythonException: {worker}"
        "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException\n"
        "Caused by: org.apache.spark.api.python.PythonException: " + worker
    )


def test_a_fenced_part_is_a_fenced_attempt_on_the_driver_with_its_coordinates():
    fenced = FencedAttemptError("p", "manual__2024-05-01T12:00:00+00:00", 2, 3, "stage of part 3: ")
    sent = for_driver(fenced)
    assert isinstance(sent, FencedAttemptError) and sent.newest == 3
    assert str(sent).startswith("[ONCEFLOW_FENCED_ATTEMPT {")
    got = task_refusal(as_the_driver_sees_it(sent))
    assert type(got) is FencedAttemptError
    assert str(got) == str(fenced)
    assert (got.pipeline, got.txid, got.attempt, got.newest) == (
        "p", "manual__2024-05-01T12:00:00+00:00", 2, 3
    )  # fmt: skip


def test_an_abandoned_txid_and_a_refused_transform_come_back_as_their_types():
    abandoned = AbandonedTxidError("p", 'odd "txid"] {x}', "stage of part 0: ")
    got = task_refusal(as_the_driver_sees_it(for_driver(abandoned)))
    assert type(got) is AbandonedTxidError and got.txid == 'odd "txid"] {x}'
    assert str(got) == str(abandoned)
    refused = task_refusal(as_the_driver_sees_it(for_driver(TransformError("rows do not fit"))))
    assert type(refused) is TransformError and str(refused) == "rows do not fit"


def test_text_without_an_error_class_and_typed_errors_are_left_alone():
    assert task_refusal(RuntimeError("onceflow.errors.FencedAttemptError: superseded")) is None
    assert task_refusal(RuntimeError("[ONCEFLOW_SOMETHING_ELSE {}] no such class")) is None
    assert task_refusal(RuntimeError("[ONCEFLOW_FENCED_ATTEMPT not json] x")) is None
    assert task_refusal(FencedAttemptError("p", "t", 1, 2)) is None
    with pytest.raises(TypeError):
        for_driver(ValueError("not an Onceflow refusal"))  # type: ignore[arg-type]
