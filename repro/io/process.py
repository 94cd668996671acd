"""Stopping a child process we started: politely, then surely, always within a deadline."""

from __future__ import annotations

import signal
import subprocess


def stop_child(process: subprocess.Popen, timeout: float = 5.0) -> None:
    """SIGTERM, wait up to `timeout`, then SIGKILL: a child that ignores TERM never outlives us."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)
