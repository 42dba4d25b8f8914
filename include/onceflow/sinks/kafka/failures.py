"""What a failed Kafka transaction of the sink becomes: the error the commit raises, naming
the sink and saying what was (not) published, and the abort that ends the transaction at
once rather than at its timeout.

Whatever fails before the Kafka commit, the transaction is aborted (nothing of it is
visible to read_committed consumers) and the ledger is unchanged, so the commit's retry
publishes once. A producer fenced by a newer committer of the pipeline is a conflict
(CommitterFencedError): the newer committer's commit stands.
"""

from __future__ import annotations

import logging
from typing import Any

from onceflow.errors import (
    CommitterFencedError,
    OnceflowError,
    SinkRejectedError,
    SinkUnavailableError,
)
from onceflow.ledger.attempt import Attempt
from onceflow.sinks.kafka import limits

log = logging.getLogger("onceflow.sinks.kafka")

_TOO_LARGE = ("MSG_SIZE_TOO_LARGE", "MESSAGE_TOO_LARGE", "RECORD_TOO_LARGE")


def fenced(err: Any) -> bool:
    """Whether a Kafka error says a newer producer of the transactional.id fenced this one."""
    return err.fatal() and err.name() in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")


def fenced_error(where: str, err: Any, doing: str, t: Attempt) -> CommitterFencedError:
    return CommitterFencedError(t.pipeline, t.txid, t.seq, where, doing, err.str())


def too_large(where: str, source: bytes, size: int, t: Attempt) -> SinkRejectedError:
    """A record of source `source` (its JSON) larger than the topic takes."""
    return SinkRejectedError(
        f"{where}: the record of source {source.decode()} ({size} bytes of value) "
        f"is too large for the topic (its max.message.bytes, or the producer's "
        f"message.max.bytes). Raise the topic's max.message.bytes, or make the transform's "
        f"output smaller and re-process txid {t.txid!r}. The transaction was aborted: "
        "nothing was published and the ledger is unchanged; the commit's retry after that "
        "publishes it once."
    )


def delivery_error(where: str, failure: tuple[Any, Any], t: Attempt) -> OnceflowError:
    """The first failed delivery, (error, message), as the commit reports it."""
    err, msg = failure
    if fenced(err):
        return fenced_error(where, err, f"publish txid {t.txid!r} (seq {t.seq})", t)
    if err.name() in _TOO_LARGE:  # a batch the broker refused: no single record named
        return SinkRejectedError(
            f"{where}: the broker refused records to {msg.topic()!r}"
            f"[{msg.partition()}] as too large ({err.str()}) for txid {t.txid!r}. Raise "
            "the topic's max.message.bytes. The transaction was aborted: nothing was "
            "published and the ledger is unchanged; the commit's retry after that "
            "publishes it once."
        )
    return SinkUnavailableError(
        f"delivery to {msg.topic()!r}[{msg.partition()}] failed: {err.str()}"
    )


def transaction_error(where: str, e: Any, doing: str, t: Attempt) -> OnceflowError:
    """A KafkaException of the transaction (begin, produce, flush, commit) as the commit
    reports it."""
    err = e.args[0]
    if fenced(err):
        return fenced_error(where, err, doing, t)
    return SinkUnavailableError(
        f"{where}: could not {doing}: {err.str()}. If the Kafka commit did not "
        "complete, nothing was published; the commit's retry reads the commit log and "
        "publishes only if the seq is not there. The ledger is unchanged."
    )


def abort(producer: Any, cause: BaseException) -> None:
    """Abort the open transaction, so read_committed consumers of the topics need not
    wait for its timeout; a fenced or failed producer may not manage it (the next
    committer's init_transactions aborts it then)."""
    try:
        producer.abort_transaction(limits.TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - the cause is what the caller reports
        log.warning("could not abort the Kafka transaction after %r: %s", cause, e)
