"""Stopping a process this one started (a broker, a server, a peer) without leaving it behind."""

from __future__ import annotations

import subprocess


def stop_child(
    proc: subprocess.Popen | None, timeout: float = 10, killed_timeout: float = 5
) -> None:
    """SIGTERM a process this one started, SIGKILL it when it lingers past `timeout`, then
    wait up to `killed_timeout` for it to go (nothing if there is none, or it is gone)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(killed_timeout)


def kill_child(proc: subprocess.Popen | None, timeout: float = 10) -> None:
    """SIGKILL a process this one started (a crash, on purpose) and wait for it to go."""
    if proc is None or proc.poll() is not None:
        return
    proc.kill()
    proc.wait(timeout)
