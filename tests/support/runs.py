"""`repro run` as users run it, from the tests: a subprocess with --json, its summary parsed, and
every verdict's claims checked against that verdict's own evidence entries."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.claims import unbacked_claims


def repro_run(*args: str, timeout: float = 90, env: dict[str, str] | None = None) -> tuple[int, dict, str]:
    """`env`: variables added to this process's environment for the run (e.g. SSL_CERT_FILE)."""
    out = subprocess.run([sys.executable, "-m", "repro", "run", "--json", *args],
                         capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **env} if env else None)
    try:
        summary = json.loads(out.stdout)
    except ValueError:
        raise AssertionError(f"no JSON summary (exit {out.returncode}): {out.stderr[-2000:]}") from None
    for verdict in summary.get("verdicts") or []:  # every claim stands on the verdict's own evidence
        assert not unbacked_claims(verdict), (unbacked_claims(verdict), verdict)
    return out.returncode, summary, out.stderr


def kinds(summary: dict) -> set[tuple[str, str | None, str]]:
    return {(v["side"], v["where"], v["kind"]) for v in summary["verdicts"]}
