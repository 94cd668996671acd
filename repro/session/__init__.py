"""One command's lifecycle: what run and bench share (lifecycle.py), then `repro run` and `repro bench`."""
