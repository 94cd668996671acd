"""The alerting rules and the Grafana dashboard `repro watch` ships (placeholder: the rules work replaces it)."""

from __future__ import annotations


def rules_yaml() -> str:
    """The Prometheus alerting rules file, as `repro watch --rules` prints it."""
    return "groups: []\n"


def dashboard_json() -> str:
    """A Grafana dashboard over the watch's metrics, as `repro watch --dashboard` prints it."""
    return "{}\n"
