"""Helpers shared by the test modules: hostile servers, real stacks, runs, claims, /proc."""
