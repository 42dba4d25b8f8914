"""A rolling restart of the stack's three brokers (ONCEFLOW_KAFKA_BROKERS=3), as an operator
does one: each broker in turn is stopped with SIGTERM (a controlled shutdown: the controller
moves its partitions' leadership to the other in-sync replicas first) and started again on
its log, the next one once every partition of the watched topics has all its replicas in
sync again. Chaos's fault 13 and the bench's rolling-restart section both run it; each
drives the waits its own way (`Waiter`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

import psutil

# how long a broker has for its controlled shutdown before the restart gives up
SHUTDOWN_TIMEOUT_S = 60.0
# how long a restarted broker's replicas have to catch up with the leaders
IN_SYNC_TIMEOUT_S = 300.0

# (condition, timeout in seconds, what is awaited) -> a generator yielding until it holds
Waiter = Callable[[Callable[[], bool], float, str], Iterator[None]]


def brokers(settings: Any) -> list[str]:
    """The stack's broker services, in restart order ([] or one on a one-node stack)."""
    from onceflow_dev import stack

    return [n for n in stack.broker_services(settings) if n.startswith("broker")]


def all_in_sync(bootstrap: str, topics: Iterable[str]) -> bool:
    """Whether every partition of `topics` has a leader and all its replicas in sync."""
    from kafka import KafkaAdminClient

    from onceflow_dev.apache_kafka import in_sync

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="onceflow-rolling-restart")
    try:
        return in_sync(admin, topics)
    finally:
        admin.close()


def roll(
    settings: Any,
    topics: Iterable[str],
    start: Callable[[], None],
    wait: Waiter,
    log: Callable[[str], None],
) -> Generator[None, None, dict[str, float]]:
    """Restart every broker in turn (`start` brings the stopped one back, e.g. the stack's
    `up`); yields while it waits; returns the seconds each broker took, from its SIGTERM to
    all replicas in sync again (`each = yield from roll(...)`)."""
    from onceflow_dev import stack

    names, topics = brokers(settings), list(topics)
    if len(names) < 2:
        raise RuntimeError("a rolling restart needs a cluster (ONCEFLOW_KAFKA_BROKERS=3)")
    each: dict[str, float] = {}
    for name in names:
        proc = stack.service_process(settings, name)
        if proc is None:
            raise RuntimeError(f"the stack's {name} is not running")
        began = time.monotonic()
        log(f"rolling restart: SIGTERM to {name} (pid {proc.pid}), a controlled shutdown")
        proc.terminate()
        # that process gone, not the service: a supervisor may have started it again already
        yield from wait(lambda proc=proc: _exited(proc), SHUTDOWN_TIMEOUT_S, f"{name} stopped")
        start()
        yield from wait(
            lambda: all_in_sync(settings.kafka_bootstrap, topics),
            IN_SYNC_TIMEOUT_S,
            f"{name} back, every replica in sync",
        )
        each[name] = round(time.monotonic() - began, 1)
    log(f"rolling restart done in {sum(each.values()):.1f} s: {each}")
    return each


def _exited(proc: psutil.Process) -> bool:
    """Whether `proc` has exited (a zombie too: its parent has not reaped it yet)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def polling(pause_s: float = 0.5, tick: Callable[[], object] | None = None) -> Waiter:
    """A Waiter for a caller with little else to do meanwhile: checks `cond` every `pause_s`
    (calling `tick` first, e.g. to sample a lag), a failing check counting as "not yet";
    TimeoutError after `timeout`."""

    def wait(cond: Callable[[], bool], timeout: float, what: str) -> Iterator[None]:
        deadline = time.monotonic() + timeout
        while True:
            if tick is not None:
                tick()
            try:
                if cond():
                    return
            except Exception:  # noqa: BLE001, S110 - a broker still starting answers nothing
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for: {what}")
            time.sleep(pause_s)
            yield

    return wait


def run(generator: Generator[None, None, Any]) -> Any:
    """Drive `generator` (roll with a polling Waiter) to its end; its return value."""
    while True:
        try:
            next(generator)
        except StopIteration as done:
            return done.value
