"""Reading a stack file (`--topology`, TOML `[[hop]]` tables) and joining it with --hop flags.

The file is read here; its text is parsed by the pure core (repro.core.hop.hops_of_toml).
"""

from __future__ import annotations

from pathlib import Path

from repro.core.hop import Hop, TopologyError, hops_of_toml, parse_hop_flag, unique_hops


def load_topology(path: str | Path) -> list[Hop]:
    path = Path(path)
    try:
        raw = path.read_text()
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read topology file ({exc.strerror or exc}); check the path") from None
    except UnicodeDecodeError:
        raise TopologyError(f"{path}: not a text file; give a TOML file of [[hop]] tables") from None
    return hops_of_toml(raw, str(path))


def hops_from(topology: str | Path | None, flags: list[str]) -> list[Hop]:
    """The user's stack from a topology file and --hop flags together, names unique across both."""
    hops = (load_topology(topology) if topology else []) + [parse_hop_flag(f) for f in flags]
    return unique_hops(hops, "--topology and --hop" if topology and flags else ("--hop" if flags else str(topology)))
