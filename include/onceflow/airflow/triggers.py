"""CommitReadyTrigger: waits in Airflow's triggerer until txid's predecessor has committed.

The commit task defers to this trigger instead of poking in reschedule mode: a waiting commit
then holds no worker slot and starts no task process per check, and there is no stream of
short task attempts whose late executor events the scheduler can mistake for external state
changes (Airflow 3.3 under load). The trigger only reads the ledger; the commit transaction
itself runs back in the task (`CommitOperator.execute_complete`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from onceflow.errors import ConfigError, UnknownTxidError
from onceflow.hooks.ledger import ledger_of_async
from onceflow.ledger.db import Ledger
from onceflow.ledger.ordering import Blocker, blocking_predecessor

#: how often a still-waiting commit says so in the task log, in seconds
WAIT_LOG_EVERY = 60.0


def describe_wait(txid: str, wait: Blocker, waited: float) -> str:
    """One log line: whom the commit of txid waits for, in what state, and since when."""
    hint = f"; its last error: {wait.last_error}" if wait.last_error else ""
    return (
        f"commit of txid {txid} waits for txid {wait.txid} (seq {wait.seq}), "
        f"which is {wait.state}{hint} (waited {waited:.0f}s)"
    )


class CommitReadyTrigger(BaseTrigger):
    """Fire once no uncommitted batch with a lower seq than txid's is left in the ledger.

    Serialises only the pipeline, the txid, the poll interval and the ledger's connection id:
    the DSN is read from that Airflow connection in the triggerer (onceflow.hooks), so
    no credentials land in the trigger table. A ledger that cannot be reached (PostgreSQL restarting) is logged and
    polled again, never turned into a failure: the commit has nothing to lose by waiting.
    """

    def __init__(
        self,
        pipeline: str,
        txid: str,
        poll_interval: float = 2.0,
        ledger_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.txid = txid
        self.poll_interval = float(poll_interval)
        self.ledger_conn_id = ledger_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "pipeline": self.pipeline,
                "txid": self.txid,
                "poll_interval": self.poll_interval,
                "ledger_conn_id": self.ledger_conn_id,
            },
        )

    def check(self, ledger: Ledger) -> Blocker | None:
        """One look at the ledger (blocking; run in a thread)."""
        return blocking_predecessor(ledger, self.pipeline, self.txid)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            ledger = await ledger_of_async(self.ledger_conn_id)
        except ConfigError as e:
            yield TriggerEvent({"status": "error", "message": str(e)})
            return
        started = time.monotonic()
        last_logged: tuple[Any, ...] | None = None
        last_logged_at = float("-inf")
        while True:
            waited = time.monotonic() - started
            try:
                wait = await asyncio.to_thread(self.check, ledger)
            except UnknownTxidError as e:
                # the batch row is gone (it cannot be: plan ran before process); let the task say so
                yield TriggerEvent({"status": "error", "message": str(e)})
                return
            except Exception as e:  # noqa: BLE001 - ledger unreachable: keep waiting, say why
                self.log.warning(
                    "commit of txid %s: cannot read the ledger (%s: %s); checking again in %.0fs",
                    self.txid,
                    type(e).__name__,
                    str(e).strip().splitlines()[0] if str(e).strip() else "",
                    self.poll_interval,
                )
                await asyncio.sleep(self.poll_interval)
                continue
            if wait is None:
                self.log.info(
                    "commit of txid %s may go: every lower seq is committed (waited %.0fs)",
                    self.txid,
                    waited,
                )
                yield TriggerEvent({"status": "ready", "waited": round(waited, 3)})
                return
            key = (wait.txid, wait.state, wait.last_error)
            if key != last_logged or time.monotonic() - last_logged_at >= WAIT_LOG_EVERY:
                self.log.info("%s", describe_wait(self.txid, wait, waited))
                last_logged, last_logged_at = key, time.monotonic()
            await asyncio.sleep(self.poll_interval)
