"""Helpers shared by the test modules (a test module imports no other: tests/test_suite_shape.py):
hostile servers, real stacks, runs, claims, /proc, metrics pages, ports, held streams, waiting,
a proxied chat round, the headless browser."""
