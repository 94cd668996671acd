"""The house's layers, checked: imports point down, the core does no I/O
(import circles: tests/test_imports.py).

From the bottom up (each layer may import those below it and its own package):

    core       repro.core.*                     pure: plain data in, plain data out
    io         repro.io.*                       the run log's files, child processes, stack files
    base       probes.*, proxies.*, repro.sim.* core and io, and their own package only
    load       repro.load.*                     driving rounds: state, driver, watchdog, clients
    live       repro.live.*                     evidence waves, the live judge, triage
    reporting  repro.reporting.*                terminal views, summaries, HTML, diffs
    session    repro.session.*                  one run's or bench's lifecycle
    lab        repro.lab.*                      the scenario matrix and the stacks it starts
    commands   repro.cli, repro.commands.*      may import anything of ours

Every import counts, at the top of a module or inside a function: an upward import hidden in a
function is still a cycle between packages. A small AST walk, no third-party linter needed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("repro", "probes", "proxies")
ORDER = ("core", "io", "base", "load", "live", "reporting", "session", "lab", "commands")
APP = {"repro.load": "load", "repro.live": "live", "repro.reporting": "reporting",
       "repro.session": "session", "repro.lab": "lab"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> str:
    if module == "repro" or module.startswith("repro.core"):
        return "core"  # repro/__init__.py holds only the version: importing repro.core runs it
    if module.startswith("repro.io"):
        return "io"
    if module.startswith(("repro.sim", "probes", "proxies")):
        return "base:" + ("repro.sim" if module.startswith("repro.sim") else module.split(".")[0])
    if module in ("repro.cli", "repro.__main__") or module.startswith("repro.commands"):
        return "commands"
    for package, name in APP.items():
        if module == package or module.startswith(package + "."):
            return name
    return "stray"  # a module outside every package: top-level repro/ holds only cli and packages


def rank(layer_name: str) -> int:
    return ORDER.index(layer_name.split(":")[0]) if layer_name != "stray" else -1


def allowed(source: str, target: str) -> bool:
    src, dst = layer(source), layer(target)
    if "stray" in (src, dst):
        return False
    if src.startswith("base:") and dst.startswith("base:"):
        return src == dst  # the base packages know nothing of one another
    return rank(dst) <= rank(src)


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from repro import events` imports repro.events: count the submodule when it is one.
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                is_module = (ROOT / Path(*candidate.split("."))).with_suffix(".py").exists() or \
                    (ROOT / Path(*candidate.split("."))).is_dir()
                found.append((node.lineno, candidate if is_module else node.module))
    return [(line, name) for line, name in found if name.split(".")[0] in OURS]


SOURCES = sorted(p for package in OURS for p in (ROOT / package).rglob("*.py"))
MODULES = {module_name(p): p for p in SOURCES}


def test_every_package_is_walked():
    assert "repro.core.events" in MODULES
    assert any(m.startswith("probes") for m in MODULES)
    assert any(m.startswith("proxies") for m in MODULES)
    assert {layer(m) for m in MODULES} >= {"core", "io", "load", "live", "reporting", "session", "lab", "commands"}


def test_top_level_repro_holds_only_the_entry_points_and_packages():
    loose = sorted(p.name for p in (ROOT / "repro").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "cli.py"]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: module_name(p))
def test_imports_point_down(path):
    source = module_name(path)
    upward = [f"{path.relative_to(ROOT)}:{line} imports {target} ({layer(target)}) from {layer(source)}"
              for line, target in imports_of(path) if not allowed(source, target)]
    assert not upward, "\n".join(upward)


# Import circles (function-level imports included) are tests/test_imports.py's.


# What the core must never touch: it is tested with plain values (docs/architecture.md#a-sans-io-core).
IO_MODULES = {"socket", "subprocess", "asyncio", "anyio", "threading", "os", "shutil", "signal", "httpx", "aiohttp",
              "time", "select", "selectors", "tempfile"}
IO_CALLS = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "sleep", "monotonic", "time"}
CORE = [p for name, p in MODULES.items() if layer(name) == "core"]


def io_in(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] in IO_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in IO_MODULES:
            found.append(f"{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in IO_CALLS:
                found.append(f"{node.lineno}: calls {name}()")
    return found


@pytest.mark.parametrize("path", CORE, ids=lambda p: module_name(p))
def test_the_core_does_no_io(path):
    found = io_in(path)
    assert not found, f"{path.relative_to(ROOT)}: I/O in the core:\n" + "\n".join(found)


def test_the_io_finder_finds_io(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import socket\nfrom subprocess import run\n\ndef f(p):\n    return open(p).read() + p.read_text()\n")
    assert [line.split(":")[0] for line in io_in(path)] == ["1", "2", "5", "5"]


@pytest.mark.parametrize("source, target, ok", [
    ("repro.core.events", "repro.core.snapshot", True),
    ("repro.core.events", "probes.sampler", False),
    ("repro.core.hop", "repro.io.stack_file", False),
    ("repro.io.stack_file", "repro.core.hop", True),
    ("probes.sampler", "repro.core.events", True),
    ("probes.sampler", "repro.session.run", False),
    ("probes.canary", "proxies.runner", False),
    ("repro.sim.app", "repro.sim.engine", True),
    ("repro.sim.app", "repro.cli", False),
    ("proxies.runner", "repro.io.process", True),
    ("repro.load.driver", "repro.live.live_judge", False),
    ("repro.live.live_judge", "repro.load.driver", True),
    ("repro.reporting.summary", "repro.session.run", False),
    ("repro.session.run", "repro.reporting.terminal", True),
    ("repro.lab.runner", "repro.session.run", True),
    ("repro.session.run", "repro.lab.runner", False),
    ("repro.session.run", "repro.commands.run", False),
    ("repro.commands.run", "repro.session.run", True),
    ("repro.stray", "repro.core.hop", False),
])
def test_the_rule_itself(source, target, ok):
    assert allowed(source, target) is ok


def test_an_import_inside_a_function_is_found(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import json\n\ndef f():\n    from repro.session.run import Run\n    from repro import core\n    return Run\n")
    assert imports_of(path) == [(4, "repro.session.run"), (5, "repro.core")]
