"""Poison records: the records of a batch on which the user's code raises.

PROTOCOL.md "Poison records and schema changes": a record on which the user's code raises
is the batch's business, like a malformed one. When a process attempt's stage job fails
because the user's code raised (`raised_by_user_code`), process
(onceflow.process.poison_records) looks for the records it raised on (`isolate`): it runs
the transform again over each input partition alone, and bisects the offsets of each one
that raises, one small Spark job per probe, until single records are left. The search
depends only on the input partitions (fixed for a txid: onceflow.reader.input_ranges) and
on the code, so every attempt and every replay of the same code finds the same records.
Then, by the pipeline's `on_transform_error`:

- "dead_letter": the stage job runs again with those records set aside by the reader
  (RangeReadFn's `skip`: neither the fast form nor the transform sees them) and staged as
  dead letters with their coordinates and the exception (onceflow.process.dead_letters, in
  a part of their own: onceflow.staging.fence); they count as records read, so records
  read = rows + dead letters still holds, and ledger.fencing.mark_staged checks it;
- "fail" (the default): the attempt ends at once, without retries, with the first such
  record's topic, partition and offset and the user's own traceback (`raised_on`): the
  code is deterministic by contract, so a retry would raise again.

What counts as the user's code raising: a Python worker's exception (Spark's
PythonException) raised in a function of the user (a UDF, a pandas UDF, mapInPandas,
mapInArrow: the worker's outermost frame that is not Spark's is not Onceflow's), or by the
transform's fast form (onceflow.staging.fast_stage marks it: `raised_in_worker`); or a data
exception of a Spark SQL expression (SQLSTATE class 22: an ANSI cast, a division by zero,
an overflow). An exception of Onceflow's own code (the reader, the stage writer), a
module the workers cannot import and every JVM fault are not: they fail the attempt as
before, and a retry may succeed.

The search costs one Spark job per probe (0.5 to 2 s each on local[2]): one per
input partition, then about two per halving for each poison record. A transform that
raises on many records is a fault of the code, not of a few records: past MAX_POISON_RECORDS
records, or MAX_PROBES probes, the attempt fails (not retried) naming the first ones.
"""

from __future__ import annotations

import re
import sysconfig
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from onceflow.errors import TransformRaisedError, UnrepeatedFailureError
from onceflow.ranges import OffsetRange

MAX_POISON_RECORDS = 100
MAX_PROBES = 400  # a few minutes of probes: beyond, the search gives up
REASON_CHARS = 1000  # a dead letter's reason keeps the exception's first 1000 characters

T = TypeVar("T")

_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')
# what may follow a traceback in a Spark failure's text, and is not the exception's
_TRAILERS = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
    "JVM stacktrace:",
)
# The marker of an exception raised by the fast form in the reader's worker (raised_in_worker)
_MARKER = f"{TransformRaisedError.__module__}.{TransformRaisedError.__name__}:"
# A Spark SQL expression's error names the user's call site: '"cast" was called from\nf.py:6'
_CALLED_FROM = re.compile(r'"(?P<function>[^"]+)" was called from\s*\n(?P<file>.+?):(?P<line>\d+)')
_PACKAGE = Path(__file__).resolve().parent
_LIBRARIES = tuple(
    {str(Path(p).resolve()) for k, p in sysconfig.get_paths().items() if k.endswith("lib")}
)


@dataclass(frozen=True)
class Frame:
    """One frame of a traceback: file, line, function and its first line of code."""

    file: str
    line: int
    function: str
    code: str = ""

    def __str__(self) -> str:
        return f"{Path(self.file).name}:{self.line} in {self.function}"


@dataclass(frozen=True)
class RaisedFailure:
    """What the user's code raised: the exception ("ValueError: cannot handle ...") and the
    frames of the user's code, outermost first (a library it called included)."""

    exception: str
    frames: tuple[Frame, ...] = ()

    @property
    def where(self) -> str:
        """The innermost frame of the user's own code ("mod.py:7 in _parse"; its file's
        name only: the folder differs where executors ship the module), else the innermost
        one."""
        own = [f for f in self.frames if not f.file.startswith(_LIBRARIES)]
        frame = (own or list(self.frames) or [None])[-1]
        return "" if frame is None else str(frame)

    @property
    def reason(self) -> str:
        """One line for a dead letter: the exception and where the user's code raised it."""
        text = " ".join(self.exception.split())
        if len(text) > REASON_CHARS:
            text = text[:REASON_CHARS] + "..."
        return f"{text} (raised at {self.where})" if self.where else text

    def traceback(self) -> str:
        """The user's frames and the exception, as Python prints a traceback."""
        lines = [_TRACEBACK]
        for f in self.frames:
            lines.append(f'  File "{f.file}", line {f.line}, in {f.function}')
            if f.code:
                lines.append(f"    {f.code}")
        lines.append(self.exception)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True)
class _Block:
    frames: tuple[Frame, ...]
    exception: str


def raised_by_user_code(error: BaseException) -> RaisedFailure | None:
    """What the user's code raised, if that is what failed a Spark job (see the module's
    docstring), else None."""
    text = str(error)
    if _TRACEBACK in text:
        return _raised_in_python(text)
    state = _sql_state(error)
    if state is None or not state.startswith("22"):
        return None
    called = _CALLED_FROM.search(text)
    frames = ()
    if called:
        frames = (Frame(called["file"].strip(), int(called["line"]), called["function"]),)
    return RaisedFailure(text.strip().splitlines()[0], frames)


def _raised_in_python(text: str) -> RaisedFailure | None:
    blocks = _blocks(text)
    for before, after in zip(blocks, blocks[1:], strict=False):
        if before.exception.startswith(_MARKER):  # the fast form, in Onceflow's worker
            ours = [i for i, f in enumerate(after.frames) if _kind(f.file) == "onceflow"]
            return RaisedFailure(after.exception, after.frames[ours[-1] + 1 if ours else 0 :])
    if not blocks or blocks[-1].exception.startswith("onceflow."):
        return None
    raised = blocks[-1]
    frames = tuple(f for f in raised.frames if _kind(f.file) not in ("spark", "neutral"))
    if not frames or _kind(frames[0].file) == "onceflow":
        return None  # Onceflow's code failed, or the worker before it ran any function
    return RaisedFailure(raised.exception, frames)


_SQL_STATE_SUFFIX = re.compile(r"\s*SQLSTATE: [0-9A-Z]{5}$")


def _blocks(text: str) -> list[_Block]:
    """The tracebacks in a Spark failure's text, in order; each one's frames and the
    exception that ends it."""
    blocks = []
    for part in text.split(_TRACEBACK)[1:]:
        frames: list[Frame] = []
        rest: list[str] = []
        for line in part.splitlines():
            found = _FRAME.match(line)
            if any(line.startswith(t) for t in _TRAILERS):
                break
            if found and not rest:
                frames.append(Frame(found["file"], int(found["line"]), found["function"]))
            elif line.startswith("    ") and frames and not rest:
                code = line.strip()
                if code and not frames[-1].code and set(code) - set("^~ "):
                    frames[-1] = Frame(frames[-1].file, frames[-1].line, frames[-1].function, code)
            elif line.strip() or rest:
                rest.append(line)
        # a Spark Connect client's text ends the exception with its SQLSTATE
        exception = _SQL_STATE_SUFFIX.sub("", "\n".join(rest).strip())
        blocks.append(_Block(tuple(frames), exception))
    return blocks


def _kind(path: str) -> str:
    """Whose code a traceback's file is: "spark" (pyspark, py4j), "onceflow" (this package,
    installed or shipped as a zip), "neutral" (<frozen importlib._bootstrap>, <string>),
    else "other"."""
    if path.startswith("<"):
        return "neutral"
    parts = re.split(r"[/\\]", path)
    if "pyspark" in parts or "py4j" in parts:
        return "spark"
    if "onceflow" in parts:
        at = len(parts) - 1 - parts[::-1].index("onceflow")
        if _PACKAGE.joinpath(*parts[at + 1 :]).is_file():
            return "onceflow"
    return "other"


def _sql_state(error: BaseException) -> str | None:
    getter = getattr(error, "getSqlState", None)
    try:
        return getter() if callable(getter) else None
    except Exception:  # noqa: BLE001 - a state the JVM cannot give is no state
        return None


def raised_in_worker(what: str, error: BaseException) -> str:
    """The message of the TransformRaisedError that Onceflow's worker code raises when user
    code it calls (a fast form) raises `error`: what raised, then the traceback from the
    call down, which `raised_by_user_code` reads on the driver. (Spark drops the cause of a
    worker's exception from its text, so the traceback travels in the message.)"""
    return f"{what} raised:\n" + "".join(
        traceback.format_exception(type(error), error, error.__traceback__)
    )


def isolate(
    pieces: Sequence[OffsetRange],
    probe: Callable[[OffsetRange], T | None],
    failure: object,
    *,
    first_only: bool = False,
    limit: int = MAX_POISON_RECORDS,
    budget: int = MAX_PROBES,
) -> list[tuple[OffsetRange, T]]:
    """The single offsets (as one-offset ranges) on which `probe` fails, each with what it
    failed with there, in the order of `pieces` and of offsets; `first_only`: just the first.

    `probe(r)` runs the code over range r alone: None when it passes, else the failure.
    Each piece that fails is bisected by offsets; a half with no record (sparse offsets)
    passes. Deterministic for a deterministic probe. `failure` is what failed the whole
    job, for the errors: UnrepeatedFailureError (a retry may pass) when no piece fails alone;
    TransformRaisedError when a range fails but neither of its halves does (the code
    raises on several records together, not on one), when more than `limit` offsets fail,
    or when finding them takes more than `budget` probes (records too many to set aside one
    by one: the time the search may take is bounded).
    """
    search = _Search(probe, first_only, limit, budget)
    failed = False
    for piece in pieces:
        raised = search.probe(piece) if piece.size else None
        if raised is None:
            continue
        failed = True
        search.bisect(piece, raised)
        if first_only and search.found:
            break
    if not failed:
        raise UnrepeatedFailureError(str(failure), len(pieces))
    return search.found


class _Search(Generic[T]):
    """isolate's bisection: the probe, the offsets found so far and the limits."""

    def __init__(
        self, probe: Callable[[OffsetRange], T | None], first_only: bool, limit: int, budget: int
    ) -> None:
        self._probe = probe
        self.first_only, self.limit, self.budget = first_only, limit, budget
        self.probes = 0
        self.found: list[tuple[OffsetRange, T]] = []

    def probe(self, r: OffsetRange) -> T | None:
        if self.probes == self.budget:
            raise self._too_many(f"the search gave up after {self.budget} probes")
        self.probes += 1
        return self._probe(r)

    def bisect(self, r: OffsetRange, raised: T) -> None:
        if r.size == 1:
            self.found.append((r, raised))
            if len(self.found) > self.limit:
                raise self._too_many(f"it raised on more than {self.limit} records")
            return
        middle = r.from_offset + r.size // 2
        halves = (
            OffsetRange(r.topic, r.partition, r.from_offset, middle),
            OffsetRange(r.topic, r.partition, middle, r.until_offset),
        )
        isolated = False
        for half in halves:
            half_raised = self.probe(half)
            if half_raised is None:
                continue
            isolated = True
            self.bisect(half, half_raised)
            if self.first_only and self.found:
                return
        if not isolated:
            raise TransformRaisedError(
                f"the transform raises {raised} on {_where(r)} to {r.until_offset - 1}, but on "
                "neither half of it alone: it raises on several records together, not on one, "
                "so no record can be set aside as a dead letter. Make the transform raise on "
                "single records only, or not at all (set `error` on the records it cannot "
                "handle), then clear the run"
            )

    def _too_many(self, why: str) -> TransformRaisedError:
        first = ", ".join(_where(r) for r, _ in self.found[:5]) or "none isolated yet"
        raised = f"; {self.found[0][1]}" if self.found else ""
        return TransformRaisedError(
            f"the transform raises on too many records of the batch to set them aside one by "
            f"one: {why} (the first: {first}{raised}). That is a fault of the code, not of a "
            "few poison records: fix the transform (or have it set `error` on the records it "
            "cannot handle), then clear the run"
        )


def _where(r: OffsetRange) -> str:
    return f"{r.topic}[{r.partition}] offset {r.from_offset}"


@dataclass(frozen=True)
class PoisonRecord:
    """A record the user's code raised on: its coordinates and the dead letter's reason."""

    topic: str
    partition: int
    offset: int
    reason: str

    @property
    def coordinates(self) -> tuple[str, int, int]:
        return (self.topic, self.partition, self.offset)

    @property
    def range(self) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, self.offset, self.offset + 1)

    def __str__(self) -> str:
        return _where(self.range)


def raised_on(transform: str, pipeline: str, where: OffsetRange, failure: RaisedFailure) -> str:
    """Why an attempt ends under on_transform_error = "fail": the record, the exception and
    the user's traceback first, then what to do."""
    return (
        f"{failure.exception.splitlines()[0] if failure.exception else 'an exception'} "
        f"on the record {_where(where)}: transform {transform!r} of pipeline {pipeline!r} "
        f"raised it (at {failure.where or 'an unknown place'}).\n{failure.traceback()}\n"
        "The transform's code is deterministic by contract, so the attempt is not retried. "
        "Fix the transform (or have it set `error` on such records), or set "
        f'on_transform_error = "dead_letter" for pipeline {pipeline!r} to stage the records '
        "it raises on as dead letters; then clear the run"
    )
