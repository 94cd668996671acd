"""The house's bar for repro/core/: no function over 80 lines, so each decision stays small enough
to read whole (the judging is a table of small rules, repro.core.classify.RULES). An AST walk:
methods and nested functions count too, each from its `def` (decorators excluded) to its last line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "repro" / "core"
LIMIT = 80
SOURCES = sorted(CORE.rglob("*.py"))


def long_functions(path: Path, limit: int = LIMIT) -> list[str]:
    """`name (N lines)` for each function or method in the file longer than `limit` lines."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{node.name} ({node.end_lineno - node.lineno + 1} lines, from line {node.lineno})"
            for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > limit]


def test_the_core_is_walked():
    assert CORE / "classify.py" in SOURCES and any(p.parent.name == "rules" for p in SOURCES)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(CORE)))
def test_no_function_in_the_core_is_over_80_lines(path):
    found = long_functions(path)
    assert not found, f"{path.relative_to(CORE.parent.parent)}: split " + ", ".join(found)


def test_the_finder_finds_a_long_method_and_a_nested_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    path = tmp_path / "long.py"
    path.write_text(f"class C:\n    async def m(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n\n"
                    f"def outer():\n    def inner():\n    {body.replace(chr(10), chr(10) + '    ')}\n    return inner\n"
                    f"\ndef short():\n{body[:-200]}\n")
    assert [f.split(" ")[0] for f in long_functions(path)] == ["outer", "m", "inner"]
