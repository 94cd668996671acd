"""A page as headless Debian chromium draws it, with the network cut: for the reports' visual checks.

Every launch routes all traffic (loopback too) to a proxy on a closed port and resolves no name, so
a page that fetched anything (a CDN's script, a font) would draw without it: the checks then see
the page as an air-gapped laptop does."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NO_NETWORK = ["--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
              "--host-resolver-rules=MAP * ~NOTFOUND"]
# The same but for 127.0.0.1, reached directly (a server the test started): without the loopback
# rule the proxy lets it by, and the resolver rule must exclude it, or it fails as a name would.
LOOPBACK_ONLY = ["--proxy-server=http://127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
# What the page measured of itself once drawn, written into the DOM for --dump-dom to carry out.
PROBE_HEAD = ("<script>window.__errors=[];window.addEventListener('error',function(e){window.__errors.push("
              "String(e.message))});</script>")
PROBE_TAIL = ("<script>window.addEventListener('load',function(){setTimeout(function(){var d=document.documentElement;"
              "var m={scrollWidth:d.scrollWidth,innerWidth:window.innerWidth,errors:window.__errors,"
              "plots:Array.prototype.filter.call(document.querySelectorAll('.js-plotly-plot'),function(d){"
              "return d.querySelector('.main-svg')}).length};"
              "var p=document.createElement('pre');p.id='probe';p.textContent=JSON.stringify(m);"
              "document.body.appendChild(p);},300);});</script>")


def _chromium(tmp_path: Path, width: int, height: int, *args: str, timeout: float = 90,
              network: list[str] = NO_NETWORK) -> str:
    # Chromium binds its profile's singleton socket in $TMPDIR and aborts (SIGABRT) when that path
    # is past a Unix socket's 108 bytes, as under .ci/run's deep TMPDIR: a short one of its own.
    with tempfile.TemporaryDirectory(prefix="chr-", dir="/tmp") as short:
        out = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
             *network, f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},{height}", *args],
            check=True, timeout=timeout, capture_output=True, text=True, env={**os.environ, "TMPDIR": short},
        )
    return out.stdout


def screenshot(page: Path, tmp_path: Path, height: int = 1000, width: int = 1200, name: str = "shot.png"):
    """The page as drawn in a window `width` x `height` px (scripts given 3 s of virtual time)."""
    from PIL import Image

    shot = tmp_path / name
    _chromium(tmp_path, width, height, "--virtual-time-budget=3000", f"--screenshot={shot}", page.as_uri())
    return Image.open(shot).convert("RGB")


def measure(page: Path, tmp_path: Path, width: int, height: int = 1000) -> dict:
    """What a copy of the page says of itself once drawn at `width` px: its scrollWidth and the
    window's innerWidth (more scroll than window: a horizontal scrollbar), the script errors, how
    many plotly charts drew their SVG (a `.js-plotly-plot` holding a `.main-svg`), and the DOM."""
    text = page.read_text(encoding="utf-8")
    probed = page.with_name(f"probed-{width}-{page.name}")
    probed.write_text(text.replace("<head>", "<head>" + PROBE_HEAD, 1).replace("</body>", PROBE_TAIL + "</body>", 1),
                      encoding="utf-8")
    dom = _chromium(tmp_path, width, height, "--virtual-time-budget=5000", "--dump-dom", probed.as_uri())
    found = re.search(r'<pre id="probe">([^<]*)</pre>', dom)
    assert found, f"the page never finished drawing: {dom[-500:]}"
    measured = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    measured["dom"] = dom
    return measured


def dump_dom(address: str, tmp_path: Path, *args: str, network: list[str] = NO_NETWORK, width: int = 1200,
             height: int = 1000, budget_ms: int = 3000) -> str:
    """The DOM of `address` (a file: or a loopback http: URL) after `budget_ms` of virtual time for its
    scripts (timers run ahead; a pending fetch holds the clock), with more chromium flags in `args`."""
    return _chromium(tmp_path, width, height, f"--virtual-time-budget={budget_ms}", *args, "--dump-dom", address,
                     network=network)


def page_requests(page: Path, tmp_path: Path) -> list[str]:
    """Every URL the page itself asked for while drawn (chromium's net log: requests with the page's
    origin as initiator; chromium's own update and account checks, "not an origin", left out), in
    order, once each. A file: page is read without the network stack, so a self-contained one asks
    for nothing."""
    log = tmp_path / "netlog.json"
    dump_dom(page.as_uri(), tmp_path, f"--log-net-log={log}")
    data = json.loads(log.read_text())
    start = data["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    found = [e["params"]["url"] for e in data["events"]
             if e.get("type") == start and "url" in e.get("params", {})
             and e["params"].get("initiator") != "not an origin"]
    return list(dict.fromkeys(found))
