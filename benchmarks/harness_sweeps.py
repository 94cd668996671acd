"""`repro harness` over the default faults for the real harnesses from npm (pinned in
tests/support/npm_harness.py): the tables docs/harness.md shows.

    python benchmarks/harness_sweeps.py                      # opencode and Claude Code, every fault
    python benchmarks/harness_sweeps.py opencode --faults healthy,wedge-reused --limit 60

Each harness runs offline (tests.support.npm_harness.offline_env: a HOME of its own, telemetry and
updates off), pointed at the fault proxy: opencode by an opencode.json rendered into each run's
folder, Claude Code by ANTHROPIC_BASE_URL. The table and JSON go to stdout and
runs/harness-NAME[-FAULTS-LIMIT].txt and .json (runs/ is not versioned). Bounded: the bound `repro harness` prints (up to
~12 minutes a harness at the default limits).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from repro.reporting.harness_table import table_lines  # noqa: E402
from tests.support.npm_harness import HARNESSES, cache_dir, installed, offline_env  # noqa: E402

OPENCODE_CONFIG = """{"provider": {"local": {"npm": "@ai-sdk/openai-compatible", "name": "local",
  "options": {"baseURL": "{proxy_url}/v1", "apiKey": "sk-local"},
  "models": {"sim-model": {"name": "sim-model"}}}},
 "model": "local/sim-model", "autoupdate": false, "share": "disabled"}
"""


def command(name: str, folder: Path) -> tuple[list[str], list[str], dict[str, str]]:
    """(repro harness options, the harness's command, its environment)."""
    binary = str(installed(name))
    if name == "opencode":
        template = folder / "opencode.json.template"
        template.write_text(OPENCODE_CONFIG)
        # opencode installs its provider package from npm on first use: a HOME kept across runs holds it.
        env = offline_env(cache_dir() / "home-opencode")
        return (["--config-template", str(template)],
                [binary, "run", "--format", "json", "-m", "local/sim-model", "read notes.txt"], env)
    env = {**offline_env(folder / "home"), "ANTHROPIC_API_KEY": "sk-any"}
    return (["--api", "messages"], [binary, "-p", "read notes.txt", "--output-format", "stream-json", "--verbose",
                                    "--allowedTools", "Read"], env)


def sweep(name: str, extra: list[str]) -> int:
    package, version = HARNESSES[name]
    with tempfile.TemporaryDirectory(prefix=f"harness-sweep-{name}-") as top:
        options, argv, env = command(name, Path(top))
        out = subprocess.run([sys.executable, "-m", "repro", "harness", "--json", *options, *extra, "--", *argv],
                             env={**env, "PYTHONPATH": str(ROOT)}, cwd=ROOT, capture_output=True, text=True,
                             timeout=3600)
    sys.stderr.write(out.stderr)
    if out.returncode != 0:
        return out.returncode
    result = json.loads(out.stdout)
    result["versions"] = {package: version}
    table = "\n".join(table_lines(result["runs"])) + "\n"
    results = ROOT / "runs"
    results.mkdir(exist_ok=True)
    stem = f"harness-{name}" + ("-" + "-".join(extra[1::2]).replace(",", "+") if extra else "")
    (results / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    (results / f"{stem}.txt").write_text(f"{package} {version}\n{table}")
    print(f"{package} {version}\n{table}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("harnesses", nargs="*", metavar="HARNESS", help=f"some of {', '.join(HARNESSES)} (default: all)")
    parser.add_argument("--faults", help="passed to repro harness")
    parser.add_argument("--limit", help="passed to repro harness")
    args = parser.parse_args()
    unknown = sorted(set(args.harnesses) - set(HARNESSES))
    if unknown:
        parser.error(f"unknown harness {unknown[0]!r}: use some of {', '.join(HARNESSES)}")
    extra = [*(["--faults", args.faults] if args.faults else []), *(["--limit", args.limit] if args.limit else [])]
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    return max((sweep(name, extra) for name in args.harnesses or HARNESSES), default=0)


if __name__ == "__main__":
    sys.exit(main())
