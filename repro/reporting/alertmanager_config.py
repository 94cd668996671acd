"""The Alertmanager snippet `repro watch --alertmanager-config` prints: a route for the watch's
alerts and the inhibit rules that keep one fault from paging twice, as data dumped with PyYAML
(so the text is always valid YAML; a test runs `amtool check-config` on it).

- The route: the watch's alerts (job, by default repro-watch) grouped by (side, where, kind), so
  each incident is one notification, and a hop's alerts (ReproWatchHopDown carries where = the
  hop) are a group of their own; tickets wait longer before they are sent, so the page that
  explains one is there to hold it back (TICKET_GROUP_WAIT).
- An incident on the server side at an engine holds back ReproWatchHopDown of the hops in front
  of that engine while it lasts: their canaries fail because the engine does, and the page already
  says so. Both alerts carry `engine` (repro/reporting/watch_rules.py: the incident's where when
  the side is server; the hop's from repro_watch_hop_engine) for the rule's `equal`.
- A page at a place (`where`) holds back the tickets at the same place: the hop's HopDown, an
  incident there placed on no side.
- The canary SLO's page (its budget burning 14.4x or 6x, repro/reporting/slo_rules.py) holds
  back its ticket (1x over 3 days): the same budget, said once.
- An incident that pages holds back the same watcher's incidents that place nothing (side
  unknown, often no `where`): while one fault is placed, a round the judge could not place (its
  canaries had not all run since it stopped) is that fault seen with less evidence, not a second
  one to be told of. The end-to-end test met exactly this: an engine frozen behind nginx gave
  `engine-unresponsive` verdicts and, between them, `no-evidence` rounds, which would otherwise
  open a ticket.

Every rule matches within one watcher (instance and job are in `equal`): two watchers of two
stacks never silence each other.
"""

from __future__ import annotations

from typing import Any

import yaml

from repro.reporting.slo_rules import ALERT as BURN_ALERT
from repro.reporting.watch_rules import JOB

RECEIVER = "repro-watch"
GROUP_BY = ["side", "where", "kind"]
# How long Alertmanager waits before the first notification of a group (more alerts of the same
# incident, from several watchers, join it), between updates of a group, and before it says again
# what still fires. Alertmanager's own defaults are 30s, 5m, 4h; the end-to-end test shortens them.
GROUP_WAIT = "30s"
GROUP_INTERVAL = "5m"
REPEAT_INTERVAL = "4h"
# A ticket's group waits longer before its first notification: Alertmanager applies inhibition when
# it sends, so a page that explains the ticket (the engine's incident for the HopDown of the hop in
# front; a placed incident for an unplaced one) has this long to arrive and hold it back. A page
# fires at the latest 30 s (its `for`) after the stall trigger (10 s) and the judging (a canary
# deadline or three) that follow the fault; 2 minutes is past that with room, and a ticket is not
# urgent. The end-to-end test met the race this closes: the first rounds of a frozen engine were
# judged before its canary had failed (side unknown) and fired 3 s before the engine's incident.
TICKET_GROUP_WAIT = "2m"


def route(job: str = JOB, receiver: str = RECEIVER, *, group_wait: str = GROUP_WAIT,
          group_interval: str = GROUP_INTERVAL, repeat_interval: str = REPEAT_INTERVAL,
          ticket_group_wait: str = TICKET_GROUP_WAIT) -> dict[str, Any]:
    """The route to put under the top-level route's `routes:` (first, so it matches the watch's
    alerts), with a child route giving tickets their longer wait (the rest inherited)."""
    return {"receiver": receiver, "matchers": [f'job="{job}"'], "group_by": list(GROUP_BY),
            "group_wait": group_wait, "group_interval": group_interval, "repeat_interval": repeat_interval,
            "routes": [{"matchers": ['severity="ticket"'], "group_wait": ticket_group_wait}]}


def inhibit_rules() -> list[dict[str, Any]]:
    """The inhibit rules, the engine's incident first."""
    within_one_watcher = ["instance", "job"]
    return [
        {   # the engine's incident explains the hops in front of it being down
            "source_matchers": ['alertname="ReproWatchIncident"', 'side="server"', 'engine=~".+"'],
            "target_matchers": ['alertname="ReproWatchHopDown"'],
            "equal": [*within_one_watcher, "engine"],
        },
        {   # a page at a place says more than a ticket at the same place
            "source_matchers": ['alertname="ReproWatchIncident"', 'severity="page"', 'where=~".+"'],
            "target_matchers": ['severity="ticket"'],
            "equal": [*within_one_watcher, "where"],
        },
        {   # the canary SLO burning fast says more than the same budget leaking slowly
            "source_matchers": [f'alertname="{BURN_ALERT}"', 'severity="page"'],
            "target_matchers": [f'alertname="{BURN_ALERT}"', 'severity="ticket"'],
            "equal": list(within_one_watcher),  # a copy each: one shared list would be dumped as a YAML alias
        },
        {   # a placed page says more than an incident the same watcher could not place
            "source_matchers": ['alertname="ReproWatchIncident"', 'severity="page"'],
            "target_matchers": ['alertname="ReproWatchIncident"', 'side="unknown"'],
            "equal": list(within_one_watcher),  # a copy each: one shared list would be dumped as a YAML alias
        },
    ]


def alertmanager_config(job: str = JOB, receiver: str = RECEIVER, **timing: str) -> dict[str, Any]:
    """The snippet as data: `route.routes` and `inhibit_rules` to merge into alertmanager.yml, and
    the receiver it names, to fill in."""
    return {"route": {"routes": [route(job, receiver, **timing)]},
            "inhibit_rules": inhibit_rules(),
            "receivers": [{"name": receiver}]}


HEADER = """\
# repro watch's Alertmanager snippet (Alertmanager 0.22 or later: matchers). Merge it into your
# alertmanager.yml: the route under your top-level route's routes: (first), the inhibit_rules
# beside yours, and give the receiver {receiver!r} your integration (webhook_configs,
# pagerduty_configs, slack_configs, ...). Alerts from Prometheus scraping the watchers under
# job_name: {job}, with `repro watch --rules`. Generated by repro.
"""


def alertmanager_yaml(job: str = JOB, receiver: str = RECEIVER, **timing: str) -> str:
    """The snippet as `repro watch --alertmanager-config` prints it."""
    document = alertmanager_config(job, receiver, **timing)
    return HEADER.format(job=job, receiver=receiver) + yaml.safe_dump(document, sort_keys=False, width=float("inf"))
