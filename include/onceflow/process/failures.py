"""What a failed Spark job of process means, and the line the ledger keeps of it.

A Spark job fails with its failed task's error as text (onceflow.staging.task_errors says
why). Some failures end the attempt for good and are raised as their typed errors
(`job_refusals`): a refusal of Onceflow's task code (a fenced attempt, an abandoned txid, a
fast form that broke its contract), and a row of an aggregating transform that breaks its
contract (transforms.aggregate_row_violation fails the task with Spark's raise_error). The
user's code raising on records is onceflow.poison's business. Anything else is worth a
retry, and `short_error` makes one line of it for the ledger's last_error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from onceflow.errors import TransformError
from onceflow.staging.task_errors import task_refusal

# A row breaking an aggregating transform's contract, as Spark reports the raise_error of
# transforms.aggregate_row_violation (Spark's error class, then the violation's own words).
_ROW_VIOLATION = re.compile(r"\[USER_RAISED_EXCEPTION\] (aggregating transform .+?) SQLSTATE")


@contextmanager
def job_refusals(aggregating: bool) -> Iterator[None]:
    """Raise the typed error of a refusal that failed a Spark job run inside: a task's
    (onceflow.staging.task_errors), or an aggregating transform's breach of its contract
    as a TransformError (the transform must change: a retry would fail the same way)."""
    try:
        yield
    except Exception as e:
        refusal = task_refusal(e)
        if refusal is not None:
            raise refusal from None
        violation = transform_refusal(str(e), aggregating)
        if violation:
            raise TransformError(violation) from None
        raise


def transform_refusal(failure: str, aggregating: bool) -> str | None:
    """Why an aggregating transform's row broke its contract (a failed stage job's text),
    or None when the job failed for another reason."""
    found = _ROW_VIOLATION.search(failure) if aggregating else None
    return found.group(1) if found else None


_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$", re.MULTILINE)
# Onceflow's errors whose line the ledger keeps when a task raised one (for the reader of
# last_error only: how process ends never depends on it)
_ONCEFLOW_ERRORS = {
    "RangeReadError",
    "FencedAttemptError",
    "AbandonedTxidError",
    "UnknownTxidError",
    "ConfigError",
    "FailpointError",
}


def short_error(e: BaseException) -> str:
    """One line for the ledger: the onceflow error raised in a Spark task, not a stack trace."""
    if type(e).__module__.startswith("onceflow") or not str(e).strip():
        return f"{type(e).__name__}: {e}"[:2000]
    text = str(e)
    found = _ERROR_LINE.findall(text)
    ours = [f for f in found if f[0] in _ONCEFLOW_ERRORS]
    if ours:
        name, msg = ours[-1]
        return f"{name}: {msg}"[:2000]
    # a Python worker's exception: its first line is generic, the raised error ends the
    # last traceback (e.g. a user transform's module missing on the executors)
    _, header, traceback = text.rpartition("Traceback (most recent call last):")
    raised = _ERROR_LINE.findall(traceback) if header else []
    if raised:
        name, msg = raised[0]
        return f"{type(e).__name__}: {name}: {msg}"[:2000]
    first = text.strip().splitlines()[0]
    return f"{type(e).__name__}: {first}"[:2000]
