"""Fault-injecting proxies for reproducing LLM-serving hangs on demand.

- HTTP layer: a mitmproxy addon (proxies.addon; as a script `mitmdump -s proxies/faults.py`) with
  round-aware faults (hold a request, withhold a response, wedge a reused connection, ...).
- TCP layer: a small asyncio relay (proxies.relay) with socket faults named after Toxiproxy toxics.
Both take the shared fault-spec grammar (repro.core.faultspec): NAME[=VALUE][,after=N|Ts][,per=conn|global].

Names are imported on first use: mitmproxy takes most of a second to import, and the pytest
plugin (loaded by every test session of a project that installs us) imports this package.
"""

from importlib import import_module

_EXPORTS = {
    "FaultProxyAddon": "proxies.addon",
    "ProxyHandle": "proxies.runner",
    "ProxyStartError": "proxies.runner",
    "start_proxy": "proxies.runner",
    "RelayHandle": "proxies.relay",
    "start_relay": "proxies.relay",
    "PROXY_FAULTS": "proxies.spec",
    "RELAY_FAULTS": "proxies.spec",
    "parse_proxy_fault": "proxies.spec",
    "parse_relay_fault": "proxies.spec",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'proxies' has no attribute {name!r}")
