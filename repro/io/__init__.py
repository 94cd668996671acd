"""The I/O every layer above the core shares: the run log's files, stopping child processes, reading stack files."""
