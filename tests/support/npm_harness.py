"""The real agent harnesses from npm, pinned, installed once and cached across runs.

`.ci/run` installs them before the suite (`python -m tests.support.npm_harness`), so the tests run
offline; a test that finds one missing installs it itself (bounded). The cache is
$REPRO_HARNESS_CACHE or ~/.cache/repro/harnesses, one folder per package@version.

Versions, pinned here: Claude Code 2.1.328 (Node, the Messages API) and
opencode 1.18.33 (a Bun binary, chat completions).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HARNESSES = {"claude": ("@anthropic-ai/claude-code", "2.1.328"), "opencode": ("opencode-ai", "1.18.33")}
INSTALL_TIMEOUT_S = 300


def cache_dir() -> Path:
    return Path(os.environ.get("REPRO_HARNESS_CACHE") or Path.home() / ".cache" / "repro" / "harnesses")


def installed(name: str) -> Path:
    """The harness's executable, installed with `npm i -E` into its cache folder if missing."""
    package, version = HARNESSES[name]
    return npm_installed(package, version, f"node_modules/.bin/{name}")


def npm_installed(package: str, version: str, inside: str) -> Path:
    """The path `inside` the cache folder of package@version, installed with `npm i -E` if
    missing (the harnesses, and tests/support/prometheus_operator.py's validators)."""
    folder = cache_dir() / f"{package.replace('/', '+')}@{version}"
    path = folder / inside
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        # --no-audit/--no-fund: nothing but the registry; a failed install says why, whole.
        out = subprocess.run(["npm", "i", "-E", "--no-audit", "--no-fund", "--prefix", str(folder),
                              f"{package}@{version}"], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
        if out.returncode != 0 or not path.exists():
            raise RuntimeError(f"npm i -E {package}@{version} failed (exit {out.returncode}): {out.stderr[-1500:]}")
    return path


def offline_env(home: Path) -> dict[str, str]:
    """What every harness run gets: a HOME of its own and no traffic but to 127.0.0.1."""
    return {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_ERROR_REPORTING": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1", "NO_PROXY": "127.0.0.1,localhost"}



def json_lines(path: Path) -> list[dict]:
    """What a harness printed to `path` as JSON lines (opencode's --format json, Claude Code's
    stream-json); any other line it printed skipped."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out

if __name__ == "__main__":  # .ci/run: install every harness before the suite
    for harness in sys.argv[1:] or HARNESSES:
        print(f"{harness}: {installed(harness)}")
