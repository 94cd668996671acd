"""`repro audit` run in-process for tests: its exit code, its --json result and its stderr.

    code, result, err = run_audit(capsys, "--hop", ..., "--no-race")

The body search is kept small (up to CAP, in STEP bytes).
"""

from __future__ import annotations

import json

from repro.cli import main

STEP = 4096
CAP = 256 * 1024


def run_audit(capsys, *flags: str) -> tuple[int, dict, str]:
    code = main(["audit", *flags, "--body-cap", str(CAP), "--body-step", str(STEP), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def by_name(result: dict) -> dict[str, dict]:
    return {hop["name"]: hop for hop in result["hops"]}
