"""The fault addon as a mitmproxy script:

    mitmdump --mode reverse:http://127.0.0.1:30000@127.0.0.1:8080 -s proxies/faults.py \\
        --set repro_fault=wedge-after=2 --set repro_flow_log=flows.jsonl --set repro_metrics_port=9101

Options: repro_fault (spec, empty = pass-through), repro_flow_log (JSON Lines path),
repro_metrics_port (metrics + admin on 127.0.0.1; 0 = a free port, announced in the log as
"repro proxy metrics at URL"; -1 = none), repro_hold_max (seconds before a held flow is released
and killed, default proxies.spec.DEFAULT_HOLD_MAX_S). The implementation lives in proxies.addon:
mitmproxy loads a script under a module name of its own, where dataclasses cannot be defined, so
this file only imports it.
"""

import os
import sys

if __name__ != "proxies.faults":  # loaded as a script: make the package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from proxies.addon import FaultProxyAddon  # noqa: E402

addons = [FaultProxyAddon()]

__all__ = ["FaultProxyAddon", "addons"]
