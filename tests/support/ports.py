"""Ports on 127.0.0.1: one nothing listens on, and the client ports connected to a server."""

from __future__ import annotations

import socket


def refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed on exit: nothing listens there


def established_client_ports(server_port: int) -> set[int]:
    """Local ports of ESTABLISHED TCP connections from 127.0.0.1 to 127.0.0.1:server_port (Linux /proc/net/tcp)."""
    ports = set()
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            local, remote, state = line.split()[1:4]
            if state == "01" and local.startswith("0100007F:") and remote == f"0100007F:{server_port:04X}":
                ports.add(int(local.split(":")[1], 16))
    return ports
