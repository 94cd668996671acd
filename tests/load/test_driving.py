"""Both drivers meet the one RoundDriver protocol (repro/load/driving.py) that runs and benches
hold them by: no union of the two, no isinstance on either, anywhere in repro/."""

from __future__ import annotations

import ast
from pathlib import Path

from repro.load.driver import Driver, DriverConfig
from repro.load.driving import RoundDriver
from repro.load.prompts import PromptSource
from repro.load.shards import ShardedDriver

ROOT = Path(__file__).resolve().parents[2]


def test_both_drivers_are_round_drivers(tmp_path):
    config = DriverConfig(base_url="http://127.0.0.1:9/v1", model="m", conversations=2)
    in_process = Driver(config, PromptSource(), lambda event: None)
    sharded = ShardedDriver(config, PromptSource(), lambda event: None, workers=2, run_dir=tmp_path, origin=0.0)
    for driver in (in_process, sharded):
        assert isinstance(driver, RoundDriver)
        assert driver.outcomes == [] and len(driver.in_flight) == 0 and not driver.stop_requested
    assert in_process.cpu_seconds() == []  # no process of its own
    assert sharded.cpu_seconds() == [None, None]  # two workers, not started: nothing read


def names_the_drivers_apart(node: ast.AST) -> bool:
    """`Driver | ShardedDriver` (a union of the two), or `isinstance(x, Driver)` / `ShardedDriver`."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return {"Driver", "ShardedDriver"} <= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
            and any(isinstance(n, ast.Name) and n.id in ("Driver", "ShardedDriver") for n in node.args[1:]))


def test_no_module_names_the_two_drivers_apart():
    found = [f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}"
             for path in sorted((ROOT / "repro").rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(), str(path))) if names_the_drivers_apart(node)]
    assert not found, found
