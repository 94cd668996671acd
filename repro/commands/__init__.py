"""One module per CLI command; each exposes `register(subparsers)` and `handle(args) -> int`. What several
commands parse alike is in options.py."""
