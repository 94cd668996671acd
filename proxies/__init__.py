"""Fault-injecting proxies for reproducing LLM-serving hangs on demand.

- HTTP layer: a mitmproxy addon (proxies.faults, also `mitmdump -s proxies/faults.py`) with
  round-aware faults (hold a request, withhold a response, wedge a reused connection, ...).
- TCP layer: a small asyncio relay (proxies.relay) with socket faults named after Toxiproxy toxics.
Both take the shared fault-spec grammar (repro.faultspec): NAME[=VALUE][,after=N|Ts][,per=conn|global].
"""

from proxies.addon import FaultProxyAddon
from proxies.runner import ProxyHandle, ProxyStartError, start_proxy
from proxies.spec import PROXY_FAULTS, RELAY_FAULTS, parse_proxy_fault, parse_relay_fault

__all__ = [
    "FaultProxyAddon",
    "PROXY_FAULTS",
    "ProxyHandle",
    "ProxyStartError",
    "RELAY_FAULTS",
    "parse_proxy_fault",
    "parse_relay_fault",
    "start_proxy",
]
