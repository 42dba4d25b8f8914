"""The failpoints of the chaos stack (onceflow.failpoints): armed by the harness as files
NAME@TXID in the stack's failpoints folder, holding the action; which fired, as the stack's
processes append them to its fired.log (wall clock, pid, name, txid, action)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path


class Failpoints:
    """The failpoints folder `folder`; `log` says what is armed and what fired."""

    def __init__(self, folder: Path, log: Callable[[str], None]) -> None:
        self.folder = folder
        self.log = log
        self.fired: list[tuple[str, str, str]] = []  # (name, txid, action), read so far
        self._fired_pos = 0

    def arm(self, name: str, txid: str, action: str) -> Path:
        path = self.folder / f"{name}@{txid}"
        tmp = path.with_name(f".arming.{path.name}")
        tmp.write_text(action + "\n")
        tmp.replace(path)
        self.log(f"armed {name}@{txid} = {action}")
        return path

    def disarm(self, name: str, txid: str) -> None:
        (self.folder / f"{name}@{txid}").unlink(missing_ok=True)

    def disarm_all(self, txid: str) -> None:
        """Every failpoint armed for txid."""
        for path in self.folder.glob(f"*@{txid}"):
            path.unlink(missing_ok=True)

    def read_fired(self) -> None:
        """The lines fired.log gained since the last read (whole lines only)."""
        path = self.folder / "fired.log"
        try:
            with open(path) as f:
                f.seek(self._fired_pos)
                data = f.read()
        except FileNotFoundError:
            return
        complete = data[: data.rfind("\n") + 1]
        self._fired_pos += len(complete.encode())
        for line in complete.splitlines():
            parts = line.split("\t")
            if len(parts) >= 5:
                self.fired.append((parts[2], parts[3], parts[4]))
                self.log(f"failpoint fired: {parts[2]}@{parts[3]} ({parts[4]}, pid {parts[1]})")

    def fired_at(self, name: str, txid: str) -> float | None:
        """When a failpoint fired for txid (wall clock, from fired.log), or None."""
        with contextlib.suppress(OSError):
            for line in (self.folder / "fired.log").read_text().splitlines():
                parts = line.split("\t")
                if len(parts) >= 5 and (parts[2], parts[3]) == (name, txid):
                    return float(parts[0])
        return None

    def has_fired(self, name: str, txid: str) -> bool:
        return any(n == name and t == txid for n, t, _ in self.fired)
