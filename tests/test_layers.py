"""The direction of imports, checked: layers import only downwards.

    commands  repro.cli, repro.commands.*                 may import anything of ours
    app       repro.<module> (run, driver, judge, ...)    core, the base packages, app
    base      probes.*, proxies.*, repro.sim.*            core and their own package only
    core      repro.core.*                                 core only

Every import counts, at the top of a module or inside a function: an upward import hidden in a
function is still a cycle between packages. A small AST walk, no third-party linter needed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("repro", "probes", "proxies")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> str:
    if module == "repro" or module.startswith("repro.core"):
        return "core"  # repro/__init__.py holds only the version: importing repro.core runs it
    if module.startswith(("repro.sim", "probes", "proxies")):
        return "base:" + ("repro.sim" if module.startswith("repro.sim") else module.split(".")[0])
    if module in ("repro.cli", "repro.__main__") or module.startswith("repro.commands"):
        return "commands"
    return "app"


def allowed(source: str, target: str) -> bool:
    src, dst = layer(source), layer(target)
    if src == "commands":
        return True
    if src == "app":
        return dst != "commands"
    if src.startswith("base:"):
        return dst == "core" or dst == src
    return dst == "core"


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


def test_every_package_is_walked():
    assert any(module_name(p) == "repro.core.events" for p in SOURCES)
    assert any(module_name(p).startswith("probes") for p in SOURCES)
    assert any(module_name(p).startswith("proxies") for p in SOURCES)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: module_name(p))
def test_imports_point_down(path):
    source = module_name(path)
    upward = [f"{path.relative_to(ROOT)}:{line} imports {target} ({layer(target)}) from {layer(source)}"
              for line, target in imports_of(path) if not allowed(source, target)]
    assert not upward, "\n".join(upward)


@pytest.mark.parametrize("source, target, ok", [
    ("repro.core.events", "repro.core.snapshot", True),
    ("repro.core.events", "probes.sampler", False),
    ("probes.sampler", "repro.core.events", True),
    ("probes.sampler", "repro.run", False),
    ("probes.canary", "proxies.runner", False),
    ("repro.sim.app", "repro.sim.engine", True),
    ("repro.sim.app", "repro.cli", False),
    ("proxies.runner", "repro.core.process", True),
    ("repro.run", "repro.commands.run", False),
    ("repro.commands.run", "repro.run", True),
])
def test_the_rule_itself(source, target, ok):
    assert allowed(source, target) is ok


def test_an_import_inside_a_function_is_found(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import json\n\ndef f():\n    from repro.run import Run\n    from repro import core\n    return Run\n")
    assert imports_of(path) == [(4, "repro.run"), (5, "repro.core")]
