"""`repro watch`'s live status page: what on-call reads at 3 a.m., from WatchStatus.to_dict().

Top down: the open incidents (the side and where in the console's words, the kind, the verdict's
sentence, the next action, since when, the run-log segment), or a plain "no open incident"; then
each hop now (up or down and why, its last canary, in flight as read, or "not read": never "idle")
and over the last hour (a strip, one cell per half minute: red down, green up, grey checked but
nothing read, blank nothing checked); the last verdicts, newest first; the incidents that
cleared; rounds by outcome; the watcher itself (loop lag, cost).

One self-contained page, a few KB: inline CSS (repro.reporting.html's, so it reads like the
reports), the strips drawn as inline SVG here rather than with plotly (plotly.js is 4.8 MB and
needs scripts, and this page is fetched every few seconds and must read with scripts off), no
request to anything but the watcher. Every value from the status is page text, escaped (a hop
name or a verdict's sentence is whatever a server said).

It updates itself from one renderer: a small script fetches the page's own address every
REFRESH_S seconds and swaps in the new `<main>` (no flicker, scroll kept; a failed fetch says
since when the watcher has not answered, so a stale page never passes for a quiet one). With
scripts off a `<noscript>` meta refresh reloads the whole page instead. A copy saved to a file
(`file:`) stays as it was.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from repro.core.text import number
from repro.core.watch_status import HOP_HISTORY_S
from repro.reporting.fit import short_url
from repro.reporting.html import CSS, html_number, html_text
from repro.reporting.terminal import side_where_words

REFRESH_S = 5  # the script's poll of the page; a meta refresh (scripts off) waits twice as long
STRIP_CELLS = 120  # over HOP_HISTORY_S: one cell per 30 s
CLEARED_SHOWN = 10
COLORS = {"down": "#e53935", "up": "#43a047", "not read": "#bdbdbd", "none": "#f5f5f5"}

PAGE_CSS = CSS + """
.state{font-weight:600}.state.up{color:#2e7d32}.state.down{color:#c62828}.state.unknown{color:#616161}
.ok{border-left:6px solid #43a047;padding:8px 12px;background:#f1f8e9}
.headline{font-size:17px;font-weight:700}.headline.server{color:#c62828}.headline.client{color:#e65100}
.headline.unknown{color:#424242}.action{font-weight:600}.muted{color:#757575}
#stale{background:#fff3e0;border:1px solid #fb8c00;padding:6px 10px}
table.hops td{vertical-align:top}table.hops th{text-align:left}svg.strip{display:block}
"""

SCRIPT = """<script>(function(){
if(location.protocol==='file:')return;
var failedSince=null;
function stale(why){var s=document.getElementById('stale');failedSince=failedSince||new Date();s.hidden=false;
s.textContent='The watcher has not answered since '+failedSince.toISOString().slice(11,19)+' UTC ('+why+
'): what follows is from then.';}
function tick(){fetch(location.href,{cache:'no-store'}).then(function(r){
if(!r.ok)throw new Error('HTTP '+r.status);return r.text();}).then(function(text){
var page=new DOMParser().parseFromString(text,'text/html'),fresh=page.getElementById('status');
if(!fresh)throw new Error('no status in its answer');
document.getElementById('status').replaceWith(document.adoptNode(fresh));document.title=page.title;
failedSince=null;document.getElementById('stale').hidden=true;
}).catch(function(e){stale(e.message);}).then(function(){setTimeout(tick,EVERY);});}
setTimeout(tick,EVERY);})();</script>""".replace("EVERY", str(REFRESH_S * 1000))


def render_watch_page(status: dict[str, Any], *, now: float | None = None) -> str:
    """The page for WatchStatus.to_dict(); `now` (wall clock) for the ages shown, the time by default."""
    now = time.time() if now is None else now
    opened = sorted(status.get("open_incidents") or [], key=lambda i: i.get("last_verdict_at") or 0, reverse=True)
    title = (f"repro watch: {len(opened)} open incident{'s' if len(opened) != 1 else ''}" if opened
             else "repro watch: no open incident")
    body = "".join((incidents_html(opened, status, now), hops_html(status.get("hops") or [], now),
                    verdicts_html(status.get("verdicts") or [], now), cleared_html(status, now),
                    rounds_html(status, now), watcher_html(status, now)))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html_text(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<noscript><meta http-equiv="refresh" content="{REFRESH_S * 2}"></noscript>
<style>{PAGE_CSS}</style></head><body>
<p id="stale" hidden></p>
<main id="status"><h1>{html_text(title)}</h1>
<p class="muted">As of {clock(now, now)}; watching since {clock(status.get('started_at'), now)}.</p>
{body}</main>{SCRIPT}</body></html>
"""


# --- sections -----------------------------------------------------------------------------------

def incidents_html(opened: list[dict[str, Any]], status: dict[str, Any], now: float) -> str:
    if not opened:
        last = status.get("last_round_at")
        since = f" The last canary round ended {clock(last, now)}." if last else " No canary round has ended yet."
        return f'<section id="incidents"><p class="ok">No open incident.{since}</p></section>'
    return '<section id="incidents"><h2>Open</h2>' + "".join(
        incident_html(i, latest_verdict(status, i), now) for i in opened) + "</section>"


def incident_html(incident: dict[str, Any], verdict: dict[str, Any] | None, now: float) -> str:
    side = incident.get("side") or "unknown"
    action = incident.get("next_action") or ""
    confirm = ((verdict or {}).get("next_action") or {}).get("confirm")
    segment = incident.get("segment")
    return (
        f'<div class="verdict incident {html_text(side)}">'
        f'<div class="headline {html_text(side)}">{words(incident)}</div>'
        f"<div><code>{html_text(incident.get('kind'))}</code>: {html_text(incident.get('summary'))}</div>"
        + (f'<div class="action">Next: {html_text(action)}</div>' if action else "")
        + (f"<div>Confirm: {html_text(confirm)}</div>" if confirm else "")
        + f"<div class=\"muted\">Open since {clock(incident.get('opened_at'), now)}; "
        f"{html_number(incident.get('verdicts'))} verdict{'s' if incident.get('verdicts') != 1 else ''}, "
        f"the last {clock(incident.get('last_verdict_at'), now)}"
        + (f"; run-log segment <code>{html_text(segment)}</code>" if segment else "")
        + ". It clears when a canary conversation started after its last verdict completes every round.</div>"
        "</div>"
    )


def hops_html(hops: list[dict[str, Any]], now: float) -> str:
    if not hops:
        return "<section id=\"hops\"><h2>Hops</h2><p>No hop watched yet.</p></section>"
    rows = "".join(hop_row(h, now) for h in hops)
    return (f'<section id="hops"><h2>Hops</h2><div class="scroll"><table class="text hops"><tr><th>hop</th>'
            f"<th>now</th><th>canary</th><th>in flight</th><th>last hour (oldest left, now right)</th></tr>"
            f"{rows}</table></div></section>")


def hop_row(hop: dict[str, Any], now: float) -> str:
    css, state, why = hop_state(hop)
    role = f" ({hop['role']})" if hop.get("role") else ""
    sampled = hop.get("sampled_at")
    # "checked", not "read": the watch stamps sampled_at whether or not the page answered (in flight says which)
    read = f"metrics checked {ago(now - sampled)} ago" if sampled is not None else "metrics not read"
    in_flight = "not read" if hop.get("in_flight") is None else number(hop["in_flight"])
    canary = ("none sent (read by its metrics)" if hop.get("takes_canary") is False
              else seconds(hop["canary_s"]) if hop.get("canary_s") is not None
              else "none answered" if hop.get("up") is False else "none yet")
    return (f'<tr class="hop" data-hop="{html_text(hop.get("name"))}"><td><b>{html_text(hop.get("name"))}</b>'
            f"{html_text(role)}<br><span class=\"muted\">{html_text(short_url(hop.get('url') or ''))}</span></td>"
            f'<td><span class="state {css}">'
            f"{html_text(state)}</span>{': ' + html_text(why) if why else ''}<br>"
            f'<span class="muted">{html_text(read)}</span></td>'
            f"<td>{html_text(canary)}</td><td>{html_text(in_flight)}</td>"
            f"<td>{strip_svg(hop.get('history') or [], now)}<br><span class=\"muted\">"
            f"{html_text(hour_words(hop.get('history') or [], now))}</span></td></tr>")


def hop_state(hop: dict[str, Any]) -> tuple[str, str, str | None]:
    """(css class, state, why): up, down and the reason the canary gave (or, for a hop read by its
    metrics only, a router found by its metrics port, its scrape), or not checked yet."""
    up = hop.get("up")
    if up is None:
        return "unknown", "not checked yet", None
    if up and hop.get("explained_by"):  # its canary failed, as the one of the hop behind it did
        return "up", "up", f"it answers; its canary fails as {hop['explained_by']}'s behind it does"
    return ("up", "up", None) if up else ("down", "down", hop.get("reason"))


def verdicts_html(verdicts: list[dict[str, Any]], now: float) -> str:
    """Newest first; a run of verdicts on one (side, where, kind) is one line with its count and
    since when, so one engine down for a minute is not twenty lines."""
    if not verdicts:
        return '<section id="verdicts"><h2>Last verdicts</h2><p>None yet.</p></section>'
    runs: list[list[dict[str, Any]]] = []
    for verdict in reversed(verdicts):
        if runs and verdict_key(runs[-1][0]) == verdict_key(verdict):
            runs[-1].append(verdict)
        else:
            runs.append([verdict])
    items = "".join(verdict_item(run, now) for run in runs)
    return f'<section id="verdicts"><h2>Last verdicts (newest first)</h2><ol>{items}</ol></section>'


def verdict_key(verdict: dict[str, Any]) -> tuple[Any, ...]:
    return verdict.get("side"), verdict.get("where") or "", verdict.get("kind")


def verdict_item(run: list[dict[str, Any]], now: float) -> str:
    """The newest verdict of a run in full, then how many more and since when."""
    v, more = run[0], len(run) - 1
    return (
        f'<li class="{html_text(v.get("side"))}">{clock(v.get("at"), now)}: <b>{words(v)}</b>, '
        f"<code>{html_text(v.get('kind'))}</code>"
        + (f" (conversation {html_number(v.get('conversation'))} round {html_number(v.get('round'))})"
           if v.get("round") else "")
        + f": {html_text(v.get('summary'))}"
        + (f" <span class=\"muted\">[segment <code>{html_text(v['segment'])}</code>]</span>" if v.get("segment") else "")
        + (f"<br><span class=\"muted\">and {more} more like it since {clock(run[-1].get('at'), now)}</span>"
           if more else "")
        + "</li>"
    )


def cleared_html(status: dict[str, Any], now: float) -> str:
    cleared = sorted((i for i in status.get("incidents") or [] if not i.get("open")),
                     key=lambda i: i.get("cleared_at") or 0, reverse=True)[:CLEARED_SHOWN]
    if not cleared:
        return ""
    items = "".join(f"<li>{words(i)}, <code>{html_text(i.get('kind'))}</code>: open "
                    f"{clock(i.get('opened_at'), now)}, cleared {clock(i.get('cleared_at'), now)}</li>"
                    for i in cleared)
    return f'<section id="cleared"><h2>Cleared</h2><ul class="muted">{items}</ul></section>'


def rounds_html(status: dict[str, Any], now: float) -> str:
    rounds = status.get("rounds") or {}
    order = ["completed", "failed", "stalled"] + sorted(set(rounds) - {"completed", "failed", "stalled"})
    counts = ", ".join(f"{html_text(o)} {html_number(rounds.get(o, 0))}" for o in order)
    last = status.get("last_round_at")
    return (f'<section id="rounds"><h2>Canary rounds</h2><p>{counts}.'
            f"{' The last ended ' + clock(last, now) + '.' if last else ''}</p></section>")


def watcher_html(status: dict[str, Any], now: float) -> str:
    cost = status.get("cost") or {}
    lag = status.get("loop_lag_s")
    # Whatever the watch states its cost in (requests_per_min, completion_tokens_per_min, ...), as words.
    spend = ", ".join(f"{html_number(round(value, 2))} {html_text(key.replace('_per_min', '/min').replace('_', ' '))}"
                      for key, value in cost.items() if isinstance(value, (int, float)))
    return (f'<section id="watcher"><h2>The watcher</h2><p>Loop lag '
            f"{html_text('not measured' if lag is None else number(round(lag * 1000, 1)) + ' ms')}"
            f"{'; cost ' + spend if spend else ''}"
            f"{'; serving on ' + html_text(status['listen']) if status.get('listen') else ''}.</p></section>")


# --- pieces -------------------------------------------------------------------------------------

def words(item: dict[str, Any]) -> str:
    """An incident's or verdict's side and where, in the console's words, escaped."""
    return html_text(side_where_words(item.get("side") or "unknown", item.get("where"), item.get("kind") or ""))


def latest_verdict(status: dict[str, Any], incident: dict[str, Any]) -> dict[str, Any] | None:
    key = (incident.get("side"), incident.get("where") or "", incident.get("kind"))
    for verdict in reversed(status.get("verdicts") or []):
        if (verdict.get("side"), verdict.get("where") or "", verdict.get("kind")) == key:
            return verdict
    return None


def clock(t: float | None, now: float) -> str:
    """'09:41:07 UTC (12 min ago)', with the date when it is not today's; escaped."""
    if t is None:
        return "-"
    at, today = datetime.fromtimestamp(t, UTC), datetime.fromtimestamp(now, UTC)
    text = at.strftime("%H:%M:%S UTC" if at.date() == today.date() else "%Y-%m-%d %H:%M:%S UTC")
    return html_text(f"{text} ({ago(now - t)} ago)" if now - t >= 1 else text)


def seconds(value: float) -> str:
    """A canary's time: '42 ms' under a second, '2.5 s' from there."""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{number(round(value, 2))} s"


def ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"
    return f"{seconds / 86400:.0f} days"


def cells(history: list[dict[str, Any]], now: float) -> list[list[dict[str, Any]]]:
    """The hour's points, one list per strip cell, oldest cell first."""
    width = HOP_HISTORY_S / STRIP_CELLS
    out: list[list[dict[str, Any]]] = [[] for _ in range(STRIP_CELLS)]
    for point in history:
        index = int((point.get("t", 0) - (now - HOP_HISTORY_S)) // width)
        if 0 <= index < STRIP_CELLS:
            out[index].append(point)
    return out


def cell_state(points: list[dict[str, Any]]) -> str:
    """The worst of a cell: a down point makes it down, else an up one up, else checked and not read."""
    if not points:
        return "none"
    ups = [p.get("up") for p in points]
    return "down" if False in ups else "up" if True in ups else "not read"


def strip_svg(history: list[dict[str, Any]], now: float) -> str:
    width = HOP_HISTORY_S / STRIP_CELLS
    rects = []
    for i, points in enumerate(cells(history, now)):
        state = cell_state(points)
        start = now - HOP_HISTORY_S + i * width
        tip = f"{datetime.fromtimestamp(start, UTC):%H:%M:%S} UTC: " + (cell_words(points) if points else "nothing checked")
        rects.append(f'<rect x="{i * 3}" y="0" width="3" height="16" fill="{COLORS[state]}">'
                     f"<title>{html_text(tip)}</title></rect>")
    return (f'<svg class="strip" role="img" aria-label="last hour" width="{STRIP_CELLS * 3}" height="16" '
            f'viewBox="0 0 {STRIP_CELLS * 3} 16" xmlns="http://www.w3.org/2000/svg">{"".join(rects)}</svg>')


def cell_words(points: list[dict[str, Any]]) -> str:
    ups = [p.get("up") for p in points]
    parts = [f"{n} {label}" for n, label in ((ups.count(False), "down"), (ups.count(True), "up"),
                                             (ups.count(None), "not read")) if n]
    canaries = [p["canary_s"] for p in points if p.get("canary_s") is not None]
    flights = [p["in_flight"] for p in points if p.get("in_flight") is not None]
    if canaries:
        parts.append(f"canary up to {seconds(max(canaries))}")
    parts.append(f"in flight up to {number(max(flights))}" if flights else "in flight not read")
    return ", ".join(parts)


def hour_words(history: list[dict[str, Any]], now: float) -> str:
    """The strip in words: how many checks were up, and when the hop was last down."""
    recent = [p for p in history if p.get("t", 0) >= now - HOP_HISTORY_S]
    checked = [p for p in recent if p.get("up") is not None]
    if not checked:
        return "nothing checked in the last hour" if not recent else "checked, nothing read in the last hour"
    down = [p for p in checked if p.get("up") is False]
    text = f"up in {len(checked) - len(down)} of {len(checked)} checks"
    if down:
        text += f"; last down {datetime.fromtimestamp(down[-1]['t'], UTC):%H:%M:%S} UTC"
    return text
