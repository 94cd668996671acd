"""What on-call reads in an 80-column terminal: every command's --help, and what the tour
(docs/commands.md#a-tour) prints. No line wider than 80 cells, no word broken at a hyphen (or after
'='), no number on one line and its unit on the next (tests/support/columns.py says how each is seen).

The tour runs as written where it needs nothing but this machine (the runs, report, diff, a small
bench); where it names a stack of yours, the same commands run against a simulated engine and a
fault proxy started here, shared by them. `repro scenarios` is left to its table's own test
(tests/commands/test_triage_probe_console.py, every width): the matrix takes over a minute. The
watch's and audit's outputs are their own tests'; their --help is checked here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from repro.cli import COMMANDS, main
from repro.sim import SimConfig, start_sim_process
from tests.support.columns import layout_faults

ROOT = Path(__file__).resolve().parents[2]
ENV = {**{k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")},
       "COLUMNS": "80", "LINES": "50", "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize("name", ["", *COMMANDS])
def test_every_help_fits_80_columns(name, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")  # argparse sizes its help from the terminal, read from COLUMNS
    with pytest.raises(SystemExit):
        main([name, "--help"] if name else ["--help"])
    text = capsys.readouterr().out
    assert text.strip()
    faults = layout_faults(text, what=f"repro {name} --help")
    assert not faults, "\n".join(faults)


def repro(cwd: Path, *args: str, timeout: float = 120) -> tuple[int, str]:
    """A command as typed in the tour, in an 80-column terminal: its exit status and all it printed."""
    out = subprocess.run([sys.executable, "-m", "repro", *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                         timeout=timeout)
    return out.returncode, out.stdout + out.stderr


def banner(cwd: Path, *args: str, lines: int, timeout: float = 30) -> str:
    """The first `lines` lines a long-running command (proxy, sim) prints, or what it printed within
    `timeout`; then it is stopped by its pid."""
    proc = subprocess.Popen([sys.executable, "-m", "repro", *args], cwd=cwd, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    read: list[str] = []

    def reader() -> None:
        for line in proc.stdout:
            read.append(line)
            if len(read) >= lines:
                return

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    thread.join(timeout)
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    return "".join(read)  # fewer lines than asked: the tests below say what is missing


@pytest.fixture(scope="module")
def tour(tmp_path_factory):
    """Each tour command's output, run once for the tests below."""
    cwd = tmp_path_factory.mktemp("tour")
    said: dict[str, tuple[int, str]] = {}
    said["run"] = repro(cwd, "run", "--rounds", "6", "--conversations", "4", "--out", "runs/healthy")
    said["run --inject"] = repro(cwd, "run", "--rounds", "6", "--inject", "wedge-after=3", "--stall-after", "2",
                                 "--out", "runs/broken")
    said["run --sim-fault"] = repro(cwd, "run", "--rounds", "6", "--sim-fault", "hang,after=3", "--stall-after", "2")
    said["report"] = repro(cwd, "report", "runs/broken")
    said["run --client openai"] = repro(cwd, "run", "--rounds", "4", "--client", "openai", "--inject",
                                        "wedge-after=3", "--stall-after", "2")
    said["run --tools --workers"] = repro(cwd, "run", "--rounds", "8", "--tools", "4", "--conversations", "8",
                                          "--workers", "2")
    # The tour's A/B bench takes 19 minutes; the same command, embedded and short, prints the same things.
    said["bench"] = repro(cwd, "bench", "--concurrency", "2,4", "--duration", "2", "--warmup", "0.2", "--repeat", "2")
    said["diff"] = repro(cwd, "diff", "runs/healthy", "runs/broken")
    sim = start_sim_process(SimConfig())
    try:
        said["sim"] = (0, banner(cwd, "sim", "--port", "0", "--dialect", "vllm", "--fault", "lose,after=5", lines=6,
                                timeout=15))
        said["proxy"] = (0, banner(cwd, "proxy", "--upstream", sim.url, "--fault", "hold-eom", lines=3, timeout=15))
        said["probe"] = repro(cwd, "probe", sim.url, sim.metrics_url)
        said["triage"] = repro(cwd, "triage", "--hop", f"name=engine-0,url={sim.url},role=engine", "--window", "1")
    finally:
        sim.stop()
    return said


TOUR = ["run", "run --inject", "run --sim-fault", "report", "run --client openai", "run --tools --workers", "bench",
        "diff", "sim", "proxy", "probe", "triage"]


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize("command", TOUR)
def test_the_quick_tour_prints_within_80_columns(tour, command):
    code, text = tour[command]
    assert text.strip(), command
    faults = layout_faults(text, what=f"repro {command} (exit {code})")
    assert not faults, "\n".join(faults) + "\n\n" + text


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_quick_tour_does_what_its_comments_say(tour):
    # The runs it diffs are its own; a bench says how long before it starts; --tools and --workers are said.
    assert [tour[c][0] for c in ("run", "run --inject", "run --sim-fault", "report", "diff")] == [0, 10, 11, 10, 0]
    assert "cannot find" not in tour["diff"][1] and "CLIENT-SIDE at proxy" in " ".join(tour["diff"][1].split())
    bench = tour["bench"][1]
    assert bench.startswith("repro bench: 4 windows (2 levels x 2 repeats x A) of 2.2 s: about 8.8 s"), bench
    assert "window 1/4" in bench  # off a terminal: a line a window
    shaped = tour["run --tools --workers"][1]
    assert "tools: 4 offered every round" in shaped and "workers: 2 processes" in shaped
    assert 'POST /sim/fault {"spec": "none"} or DELETE /sim/fault' in tour["sim"][1]


def panel_shape(text: str) -> list[str]:
    """The first stall verdict panel in `text`, numbers masked: its title, headline and kind lines,
    the labels of its rows and the hops of its evidence (a port or a timing differs at each run)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("╭─ stall verdict"))
    rows = [line.strip("│").rstrip() for line in lines[start + 1:next(i for i in range(start, len(lines))
                                                                        if lines[i].startswith("╰"))]]
    masked = [re.sub(r"\d+(\.\d+)?", "N", line.strip(" ─╮")) for line in [lines[start], *rows[:2]]]
    labels = [row[1:10].strip() for row in rows[2:] if row[1:10].strip()]
    hops = [row[11:20].strip() for row in rows[2:] if row[11:20].strip() and row[1:10].strip() in ("evidence", "")]
    return masked + labels + sorted(set(hops) & {"proxy", "client", "engine-0"})


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_readmes_panel_is_what_the_same_run_prints_now(tour):
    """The README's panel is real output, remade by `python scripts/doc_blocks.py verdict-panel`: the
    same command in the tour prints a panel of the same shape, so a change to the panel shows here."""
    readme = (ROOT / "README.md").read_text()
    assert panel_shape(tour["run --inject"][1]) == panel_shape(readme), "remake it: python scripts/doc_blocks.py"
