"""The test suite's own shape, checked: a test module imports no other test module (pytest would
collect it twice over, and a helper hidden in a test file is found by nobody), and every helper
module under tests/ lives in tests/support/.

tests/harnesses/ holds programs the tests start as child processes (a user's script under
`repro triage --pid`): never imported, so not helpers; the check makes sure of that too.

Last, the guard of tests/conftest.py, run on a small suite of its own: under `-m "not network"`
an unmarked test that binds a socket or starts a process fails, even when it swallows the error.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
HARNESSES = TESTS / "harnesses"


def is_test_module(path: Path) -> bool:
    return path.name.startswith("test_") and path.suffix == ".py"


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every absolute import in the file, at the top or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def bad_imports(root: Path) -> list[str]:
    """Imports of a test module or of a harness, from any module under root (a tests/ folder)."""
    problems: dict[str, str] = {}  # one per import statement
    for path in sorted(root.rglob("*.py")):
        for line, module in imported_modules(path):
            parts = module.split(".")
            if parts[0] == "tests" and (any(part.startswith("test_") for part in parts) or "harnesses" in parts):
                problems.setdefault(f"{path.relative_to(root.parent)}:{line}", module)
    return [f"{where}: imports {module}" for where, module in problems.items()]


def stray_helpers(root: Path) -> list[str]:
    """Modules under root that are neither test modules, conftest.py, package markers, harnesses,
    nor in support/."""
    return [str(path.relative_to(root.parent)) for path in sorted(root.rglob("*.py"))
            if not (is_test_module(path) or path.name in ("conftest.py", "__init__.py")
                    or (root / "support") in path.parents or (root / "harnesses") in path.parents)]


def test_no_test_module_imports_another_test_module_or_a_harness():
    assert not bad_imports(TESTS), "move the shared helper into tests/support/:\n" + "\n".join(bad_imports(TESTS))


def test_every_helper_module_lives_in_support():
    assert not stray_helpers(TESTS), "helpers belong in tests/support/:\n" + "\n".join(stray_helpers(TESTS))


def test_the_checks_find_what_they_look_for(tmp_path):
    root = tmp_path / "tests"
    (root / "probes").mkdir(parents=True)
    (root / "support").mkdir()
    (root / "probes" / "test_a.py").write_text("X = 1\n")
    (root / "probes" / "test_b.py").write_text("def f():\n    from tests.probes.test_a import X\n    return X\n")
    (root / "probes" / "test_c.py").write_text("from tests.probes import test_a\nfrom tests.support.ports import refused_port\n")
    (root / "probes" / "pages.py").write_text("PAGE = ''\n")
    (root / "support" / "ports.py").write_text("")
    assert bad_imports(root) == ["tests/probes/test_b.py:2: imports tests.probes.test_a",
                                 "tests/probes/test_c.py:1: imports tests.probes.test_a"]
    assert stray_helpers(root) == ["tests/probes/pages.py"]


def test_the_fast_set_refuses_sockets_and_processes_to_unmarked_tests(pytester):
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    network: opens sockets\n")
    pytester.makepyfile(test_inner="""
        import asyncio
        import socket
        import subprocess
        import sys

        import pytest


        def test_binds():
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))


        def test_swallows_the_error():
            try:
                subprocess.run([sys.executable, "-c", "pass"])
            except Exception:
                pass


        def test_an_event_loop_still_runs():
            asyncio.run(asyncio.sleep(0))


        @pytest.mark.network
        def test_marked():
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
    """)
    result = pytester.runpytest_inprocess("-m", "not network", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*used socket bind but is not marked `network`*",
                                 "*used a child process but is not marked `network`*"])
    result.assert_outcomes(passed=2, failed=1, errors=2, deselected=1)
