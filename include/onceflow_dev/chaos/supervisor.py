"""The chaos stack's services, as a process supervisor keeps them: brought up (a few
attempts), watched every few seconds (one that died is restarted, and counted for the
report), brought down at the end unless kept; and, with --lake-s3, the S3 emulator the lake
table lives on."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any


class Supervisor:
    """The services of the stack of `settings`; `log` says what it does."""

    def __init__(self, settings: Any, log: Callable[[str], None]) -> None:
        self.settings = settings
        self.log = log
        self.restarts: Counter[str] = Counter()
        self._last_health = 0.0
        self.s3 = None  # the running S3Emulator (start_s3), for --lake-s3
        self._services: tuple[str, ...] | None = None  # what the stack runs (watch)

    def start_s3(self, home: Path, slot: int) -> None:
        """The lake table's object storage: an S3 emulator, whose settings the stack's
        processes (Airflow's, spark-submit's) inherit (sinks.lake.storage.STORAGE_ENV)."""
        from onceflow.sinks.lake.storage import STORAGE_ENV

        from onceflow_dev.s3_emulator import S3Emulator

        # a port of the slot's range that neither the slot's brokers nor the bench's take
        self.s3 = S3Emulator(home / "s3", port=29099 + 10 * slot)
        self.s3.start()
        os.environ[STORAGE_ENV] = self.s3.storage.to_env()
        self.log(f"S3 emulator (moto) up on {self.s3.storage.endpoint}")

    def up(self, attempts: int = 3) -> None:
        from onceflow_dev import stack

        for attempt in range(1, attempts + 1):
            try:
                stack.up(self.settings, echo=lambda m: self.log(f"  up: {m}"))
                return
            except stack.StackError as e:
                self.log(f"stack up failed (attempt {attempt}): {str(e).splitlines()[0]}")
                if attempt == attempts:
                    raise
                time.sleep(3)

    def watch(self) -> None:
        """Every few seconds: restart any service that died (what a process supervisor does)."""
        from onceflow_dev import stack

        if time.monotonic() - self._last_health < 5:
            return
        self._last_health = time.monotonic()
        if self._services is None:  # the pipelines file is the run's from the start
            self._services = stack.stack_services(self.settings)
        dead = [n for n in self._services if stack.service_process(self.settings, n) is None]
        if dead:
            self.restarts.update(dead)
            self.log(f"services down: {', '.join(dead)}; restarting them (stack up)")
            self.up()

    def down(self, keep: bool) -> None:
        """Stop the stack and the S3 emulator, unless `keep` (--keep)."""
        from onceflow_dev import stack

        if not keep:
            self.log("stopping the chaos stack")
            stack.down(self.settings, echo=lambda m: self.log(f"  down: {m}"))
        else:
            self.log(f"--keep: the chaos stack stays up (ONCEFLOW_HOME={self.settings.home})")
        if self.s3 is not None and not keep:
            self.s3.stop()
