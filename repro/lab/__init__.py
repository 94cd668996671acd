"""The reproduction lab: the scenario matrix, the real stacks it starts, the router launcher."""
