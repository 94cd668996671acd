"""`repro watch --kubernetes`: the watch as a Kubernetes workload, for a cluster run with the
Prometheus operator.

- a Deployment of one replica (Recreate: two watchers at once would double the canary load and
  every alert) running `repro watch` with the user's flags, listening on all addresses for the
  scrape, probed on /metrics, its rotating run log on a volume (an emptyDir sized to the log's
  own bound, or a PersistentVolumeClaim that outlives the pod);
- a Service in front of it, named after the scrape job: the operator names the job after the
  Service, and the rules select the watcher by that job;
- a ServiceMonitor that scrapes it, and the alerting rules (repro.reporting.watch_rules) and the
  canary SLO's recording rules and burn-rate alerts (repro.reporting.slo_rules) as a
  PrometheusRule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from repro.reporting.kubernetes_pod import container_security, labels, pod_security, resources
from repro.reporting.slo_rules import DEFAULT_SLO
from repro.reporting.watch_rules import rule_groups

PORT = 9464  # repro watch's own default port (repro.core.watch_status.DEFAULT_LISTEN)
LOG_DIR = "/var/lib/repro/watch"
API_KEY_SECRET = "repro-api-key"  # optional: the canaries' key, never in the arguments
SCRAPE_INTERVAL = "30s"


@dataclass(frozen=True)
class WatchPod:
    name: str  # every object's name, and the scrape job's
    namespace: str
    image: str
    args: list[str]  # the user's flags for `repro watch`
    claim: str | None = None  # a PersistentVolumeClaim for the log; None: an emptyDir
    log_mib: float = 0.0  # what the rotating log keeps at most (its keep bound plus a segment)
    slo: float = DEFAULT_SLO  # the canary SLO's objective, for its burn-rate alerts (--slo)


def watch_manifests(pod: WatchPod) -> list[dict[str, Any]]:
    """Deployment, Service, ServiceMonitor and PrometheusRule, in the order to apply them."""
    return [deployment(pod), service(pod), service_monitor(pod), prometheus_rule(pod)]


def deployment(pod: WatchPod) -> dict[str, Any]:
    selector = labels("watch", pod.name)
    # A watch whose /metrics stops answering is stuck: restart it (three failed probes, 90 s). Not
    # ready until it answers, so a restarted pod's empty first scrape is not read as silence.
    probe = {"httpGet": {"path": "/metrics", "port": "metrics"}, "periodSeconds": 30, "timeoutSeconds": 5,
             "failureThreshold": 3}
    log_volume: dict[str, Any] = ({"persistentVolumeClaim": {"claimName": pod.claim}} if pod.claim else
                                  {"emptyDir": {"sizeLimit": f"{max(1, math.ceil(pod.log_mib))}Mi"}})
    container = {
        "name": "repro-watch",
        "image": pod.image,
        "command": ["repro"],
        "args": ["watch", *pod.args, "--listen", f"0.0.0.0:{PORT}", "--out", LOG_DIR],
        "ports": [{"name": "metrics", "containerPort": PORT, "protocol": "TCP"}],
        "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}, *api_key_env()],
        "readinessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 1},
        "livenessProbe": {**probe, "initialDelaySeconds": 30},
        "resources": resources("250m", "256Mi"),
        "securityContext": container_security(),
        "volumeMounts": [{"name": "log", "mountPath": LOG_DIR}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "labels": selector},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "securityContext": pod_security(),
                    # Stopping writes the log's last lines and closes the incidents it holds.
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container],
                    "volumes": [{"name": "log", **log_volume}, {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
                },
            },
        },
    }


def api_key_env() -> list[dict[str, Any]]:
    """The API keys from a Secret the user creates (optional: a stack without keys needs none)."""
    return [{"name": key, "valueFrom": {"secretKeyRef": {"name": API_KEY_SECRET, "key": key, "optional": True}}}
            for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")]


def service(pod: WatchPod) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "labels": labels("watch", pod.name)},
        "spec": {"selector": labels("watch", pod.name),
                 "ports": [{"name": "metrics", "port": PORT, "targetPort": "metrics", "protocol": "TCP"}]},
    }


def service_monitor(pod: WatchPod) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "labels": labels("watch", pod.name)},
        "spec": {"selector": {"matchLabels": labels("watch", pod.name)},
                 "endpoints": [{"port": "metrics", "path": "/metrics", "interval": SCRAPE_INTERVAL}]},
    }


def prometheus_rule(pod: WatchPod) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "labels": labels("watch", pod.name)},
        "spec": {"groups": rule_groups(pod.name, slo=pod.slo)},  # the alerts, then the canary SLO's group
    }
