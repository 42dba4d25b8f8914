"""Onceflow's refusals raised in a Spark task, known by their type on the driver.

Spark hands the driver a failed task's Python exception as text only: the Python worker
sends its formatted traceback to the JVM (pyspark.util.handle_worker_exception), the JVM
fails the task and then the job with it, and the driver's action raises a Py4JJavaError
whose message holds that text among the JVM's. The exception's type and attributes do not
cross. Yet some errors of Onceflow's task code decide how process ends: the part fence
refusing a fenced attempt (exit FENCED) or an abandoned txid (ABANDONED), a fast form that
breaks its contract (a TransformError: USAGE); any other failure is worth a retry.

So a task raises those (`for_driver`) with an error class at the start of the message, in
the form of Spark's own error messages, and the error's attributes as JSON:

    [ONCEFLOW_FENCED_ATTEMPT {"attempt": 2, "newest": 3, "pipeline": "p", "txid": "t"}] ...

and the driver (`task_refusal`) finds the class in the failure and rebuilds
the error: its listed type, its attributes, the message that follows. The classes
(ERROR_CLASSES) are an interface between a build's tasks and its driver, and between its
logs and their readers: a class's name never changes. A message is one line.

The user's code raising in a task (the fast form's TransformRaisedError, which carries a
traceback) is told apart otherwise: onceflow.poison.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from onceflow.errors import AbandonedTxidError, FencedAttemptError, OnceflowError, TransformError

ERROR_CLASSES: dict[str, type[OnceflowError]] = {
    "ONCEFLOW_FENCED_ATTEMPT": FencedAttemptError,  # a newer attempt claimed the txid
    "ONCEFLOW_ABANDONED_TXID": AbandonedTxidError,  # a reset abandoned the txid
    "ONCEFLOW_TRANSFORM_REFUSED": TransformError,  # a fast form broke its contract
}
_CLASS = re.compile(r"\[(ONCEFLOW_[A-Z_]+) ")
_DECODER = json.JSONDecoder()
_ATTRIBUTE_TYPES = (str, int, float, bool, type(None))


def for_driver(error: OnceflowError) -> OnceflowError:
    """`error` as a task raises it for the driver: its type and attributes, its message led
    by its error class and attributes."""
    name = next(
        (n for n, kind in ERROR_CLASSES.items() if isinstance(error, kind)),
        None,
    )
    if name is None:
        raise TypeError(f"{type(error).__name__} has no error class in ERROR_CLASSES")
    attributes = {k: v for k, v in vars(error).items() if isinstance(v, _ATTRIBUTE_TYPES)}
    header = f"[{name} {json.dumps(attributes, sort_keys=True)}]"
    return _rebuilt(type(error), f"{header} {error}", vars(error))


def task_refusal(failure: BaseException) -> OnceflowError | None:
    """The listed error a Spark task raised (for_driver) that failed the job `failure`,
    rebuilt as its listed type; None when `failure` holds none (or is typed already)."""
    if isinstance(failure, OnceflowError):
        return None
    text = str(failure)
    for found in _CLASS.finditer(text):
        kind = ERROR_CLASSES.get(found[1])
        if kind is None:
            continue
        try:
            attributes, end = _DECODER.raw_decode(text, found.end())
        except ValueError:
            continue
        if isinstance(attributes, dict) and text.startswith("] ", end):
            message = text[end + 2 :].splitlines()[0] if end + 2 < len(text) else ""
            return _rebuilt(kind, message, attributes)
    return None


def _rebuilt(kind: type[OnceflowError], message: str, attributes: Mapping[str, Any]) -> Any:
    # Not kind(message): the listed types take their coordinates, not a message, and the
    # message was already made from them.
    error = kind.__new__(kind)
    error.args = (message,)
    vars(error).update(attributes)
    return error
