"""The blocks of real output in README.md and the docs pages, made by what prints them, never typed.

A block sits between two marker lines (HTML comments, invisible once rendered):

    <!-- NAME: made by scripts/doc_blocks.py -->
    ```
    ...what the command printed...
    ```
    <!-- end NAME -->

    python scripts/doc_blocks.py            # remake every block (the panel runs repro: ~15 s)
    python scripts/doc_blocks.py NAME ...   # remake those blocks only
    python scripts/doc_blocks.py --check    # exit 1 naming each block made without I/O that is out of date

The blocks made from data alone (the alert rules, the metric table) are checked by
tests/test_docs.py as they are; the verdict panel is real output of a run (a port, a
timing differ at each run), so its test holds it to the verdict rules and to the panel's shape.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The command whose first verdict panel the README shows, at 80 columns.
PANEL_COMMAND = ("run", "--rounds", "6", "--inject", "wedge-after=3", "--stall-after", "2")


def verdict_panel() -> str:
    """The first verdict panel `COLUMNS=80 repro run --rounds 6 --inject wedge-after=3 --stall-after 2`
    prints, run here against the embedded simulated engine."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**{k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")},
               "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-m", "repro", *PANEL_COMMAND, "--out", f"{tmp}/run"], cwd=tmp,
                             env=env, capture_output=True, text=True, timeout=120)
    lines = (out.stdout + out.stderr).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("╭─ stall verdict"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("╰"))
    return "```\n" + "\n".join(lines[start:end + 1]) + "\n```\n"


@functools.cache  # the README's block and docs/wrap.md's are one run
def wrap_opencode() -> str:
    """`repro wrap` catching a real opencode (npm, pinned: tests/support/npm_harness.py) held by a
    proxy after two rounds, against the simulated engine answering with `read` tool calls: the
    lines wrap printed, from the fault proxy's to the end of its first verdict panel."""
    from repro.sim import SimConfig, serve_in_thread
    from tests.support.wrapping import opencode_project

    with tempfile.TemporaryDirectory() as tmp:
        project = opencode_project(Path(tmp), "sim-model")
        config = SimConfig(reply_tokens=10, tool_rounds=4, tool_name="read", tool_path=str(project.notes))
        with serve_in_thread(config) as sim:
            argv = ["wrap", "--hop", f"name=engine-0,url={sim.url}", "--inject", "wedge-after=2",
                    "--config-template", str(project.template), "--cwd", str(project.folder), "--stall-after", "2",
                    "--stop-on-verdict", "--out", f"{tmp}/run", "--", *project.command]
            out = subprocess.run([sys.executable, "-m", "repro", *argv], cwd=tmp, capture_output=True, text=True,
                                 env={**project.env, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}, timeout=180)
    lines = out.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("fault proxy "))
    end = next(i for i, line in enumerate(lines) if line.startswith("╰"))
    shown = ["$ repro wrap --hop name=engine-0,url=http://127.0.0.1:PORT --inject wedge-after=2 \\",
             "    --config-template opencode.json.template --cwd project --stall-after 2 \\",
             "    --stop-on-verdict -- opencode run --format json -m local/sim-model \"read notes.txt\""]
    return "```\n" + "\n".join([*shown, *lines[start:end + 1]]) + "\n```\n"


def watch_rules() -> str:
    """The alert rules file, as `repro watch --rules` prints it."""
    from repro.reporting.watch_rules import rules_yaml

    return f"```yaml\n{rules_yaml()}```\n"


def watch_metrics() -> str:
    """The metric contract of `repro watch` (repro/core/watch_status.py METRICS) as a table."""
    from repro.core.watch_status import METRICS

    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    rows += [f"| `{name}` | {kind} | {', '.join(labels) or '-'} | {meaning} |"
             for name, (kind, meaning, labels) in METRICS.items()]
    return "\n".join(rows) + "\n"


# The commands whose manifests docs/kubernetes.md shows, as printed (no I/O: flags in, YAML out).
KUBERNETES_WATCH = ("watch", "--kubernetes", "--hop", "name=gateway,url=http://gateway.llm:8080/v1,role=proxy",
                    "--hop", "name=engine-0,url=http://sglang-0.llm:30000,role=engine", "--namespace", "llm")
KUBERNETES_JOB = ("run", "--kubernetes-job", "3", "--target", "http://gateway.llm:8080/v1", "--conversations", "24",
                  "--rounds", "12", "--namespace", "llm")


def printed(argv: tuple[str, ...]) -> str:
    """What `repro ARGV` prints on stdout, run in this process, as a shell block and a YAML block."""
    import contextlib
    import io

    from repro.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(list(argv))
    return f"```\nrepro {' '.join(argv)}\n```\n\n```yaml\n{out.getvalue()}```\n"


# name -> (the file that holds it, its maker, made without I/O)
BLOCKS: dict[str, tuple[str, Callable[[], str], bool]] = {
    "verdict-panel": ("README.md", verdict_panel, False),
    "wrap-opencode": ("README.md", wrap_opencode, False),
    "wrap-opencode-docs": ("docs/wrap.md", wrap_opencode, False),
    "watch-rules": ("docs/watch.md", watch_rules, True),
    "watch-metrics": ("docs/watch.md", watch_metrics, True),
    "kubernetes-watch": ("docs/kubernetes.md", lambda: printed(KUBERNETES_WATCH), True),
    "kubernetes-job": ("docs/kubernetes.md", lambda: printed(KUBERNETES_JOB), True),
}


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {re.escape(name)}: made by scripts/doc_blocks.py -->\n)(.*?)(<!-- end {re.escape(name)} -->)",
                      re.DOTALL)


def block(text: str, name: str) -> str:
    """The block `name` as it stands in `text` (KeyError when its markers are missing)."""
    found = _pattern(name).search(text)
    if found is None:
        raise KeyError(f"no block {name!r}: its markers are missing")
    return found.group(2)


def with_block(text: str, name: str, body: str) -> str:
    block(text, name)  # the markers must be there
    return _pattern(name).sub(lambda m: m.group(1) + body + m.group(3), text)


def stale(names: list[str]) -> list[str]:
    """The blocks among `names` whose file does not hold what their maker makes now."""
    return [name for name in names
            if block((ROOT / BLOCKS[name][0]).read_text(), name) != BLOCKS[name][1]()]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--check"]:
        out_of_date = stale([name for name, (_, _, pure) in BLOCKS.items() if pure])
        for name in out_of_date:
            print(f"{BLOCKS[name][0]}: block {name} is out of date: python scripts/doc_blocks.py {name}")
        return 1 if out_of_date else 0
    unknown = [name for name in argv if name not in BLOCKS]
    if unknown:
        print(f"doc_blocks: unknown block {unknown[0]!r}; blocks: {', '.join(BLOCKS)}", file=sys.stderr)
        return 2
    for name in argv or list(BLOCKS):
        path = ROOT / BLOCKS[name][0]
        path.write_text(with_block(path.read_text(), name, BLOCKS[name][1]()))
        print(f"{path.relative_to(ROOT)}: {name} remade")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
