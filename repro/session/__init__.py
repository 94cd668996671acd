"""One command's lifecycle: what run and bench share, then `repro run` and `repro bench`."""
