"""The reproduction lab: the scenario matrix (matrix), the stack each scenario runs on (topology),
faults from outside (actions), one scenario run and judged (runner), the real proxies (stacks), the
router launcher."""
