"""The Prometheus operator's ServiceMonitor and PrometheusRule validated by a real part: the ajv
validators of the npm package @kubernetes-models/prometheus-operator (MIT), generated from the
operator's API types, run by node on validate_operator_objects.mjs (here).

Pinned (`npm i -E`) and cached beside the harnesses (tests/support/npm_harness.py); `.ci/run`
installs it before the suite (`python -m tests.support.prometheus_operator`), so the tests run
offline; a test that finds it missing installs it itself (bounded).

What these validators check: types, required fields, enums and patterns (a duration such as
`for: 30s`). What they do not: an unknown field passes (the generated schemas set no
`additionalProperties: false`), so a misspelt optional field is not caught here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.support.npm_harness import npm_installed

PACKAGE, VERSION = "@kubernetes-models/prometheus-operator", "6.0.0"
SCRIPT = Path(__file__).with_name("validate_operator_objects.mjs")
VALIDATE_TIMEOUT_S = 30


class InvalidOperatorObject(Exception):
    """An object the validators reject; `problems` lists each (path, keyword, message)."""

    def __init__(self, kind: str, problems: list[dict[str, str]]) -> None:
        super().__init__(f"{kind}: {problems}")
        self.kind, self.problems = kind, problems


def package_dir() -> Path:
    return npm_installed(PACKAGE, VERSION, f"node_modules/{PACKAGE}/package.json").parent


def problems(objects: list[dict[str, Any]]) -> list[list[dict[str, str]]]:
    """What the validators find wrong with each object ([] for a valid one), in one node run."""
    out = subprocess.run(["node", str(SCRIPT), str(package_dir())], input=json.dumps(objects),
                         capture_output=True, text=True, timeout=VALIDATE_TIMEOUT_S)
    if out.returncode != 0:
        raise RuntimeError(f"node {SCRIPT.name} failed (exit {out.returncode}): {out.stderr[-1500:]}")
    found = json.loads(out.stdout)
    assert len(found) == len(objects), found
    return found


def validate(obj: dict[str, Any]) -> None:
    """Raises InvalidOperatorObject if the validators reject `obj`."""
    [found] = problems([obj])
    if found:
        raise InvalidOperatorObject(obj["kind"], found)


if __name__ == "__main__":  # .ci/run: install the validators before the suite
    print(f"{PACKAGE}@{VERSION}: {package_dir()}")
