"""One module per CLI command; each exposes `register(subparsers)` and `handle(args) -> int`."""
