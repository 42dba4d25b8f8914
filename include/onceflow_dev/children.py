"""Stopping a process this one started (a broker, a server, a peer) without leaving it behind."""

from __future__ import annotations

import subprocess


def stop_child(proc: subprocess.Popen, timeout: float = 10, killed_timeout: float = 5) -> None:
    """SIGTERM a process this one started, SIGKILL it when it lingers past `timeout`, then
    wait up to `killed_timeout` for it to go."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(killed_timeout)
