"""What every pod repro prints for Kubernetes shares: how its container runs and how the objects
are written out.

`repro watch --kubernetes` (a Deployment) and `repro run --kubernetes-job` (an Indexed Job) both
run repro's own image as a non-root user on a read-only root filesystem, with no capabilities and
no privilege escalation (the Pod Security Standards' "restricted" profile), writing only to the
volume mounted for its run log or run folders. The manifests are data dumped by PyYAML, so they are
always valid YAML: nothing here is assembled as text.
"""

from __future__ import annotations

from typing import Any

import yaml

DEFAULT_IMAGE = "ghcr.io/example/repro:0.1.0"
# The user the image runs as: any id but 0 (runAsNonRoot is checked against it by the kubelet).
RUN_AS_USER = 10001


def labels(component: str, name: str) -> dict[str, str]:
    """The recommended labels (app.kubernetes.io/*) every object of one deployment carries."""
    return {"app.kubernetes.io/name": "repro", "app.kubernetes.io/instance": name,
            "app.kubernetes.io/component": component}


def pod_security() -> dict[str, Any]:
    """The pod's securityContext: non-root, the runtime's default seccomp profile."""
    return {"runAsNonRoot": True, "runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER, "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"}}


def container_security() -> dict[str, Any]:
    """The container's securityContext: read-only root, no privilege escalation, no capabilities."""
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]}}


def resources(cpu: str, memory: str) -> dict[str, Any]:
    """Requests equal to limits for memory (never OOM-killed for a neighbour's use), a CPU request
    with a limit twice it (bursts while a verdict's evidence is gathered)."""
    cpu_limit = f"{int(cpu.removesuffix('m')) * 2}m" if cpu.endswith("m") else f"{float(cpu) * 2:g}"
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu_limit, "memory": memory}}


class _Written(yaml.SafeDumper):
    """Every value written out where it is used: the labels a Deployment repeats in its selector and
    its template read as labels, not as YAML anchors and aliases (&id001, *id001)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


# A text of several lines (a rule's PromQL) as a block, read as written, not one quoted line of \n.
_Written.add_representer(
    str, lambda dumper, scalar: dumper.represent_scalar("tag:yaml.org,2002:str", scalar,
                                                       style="|" if "\n" in scalar else None))


def manifests_yaml(objects: list[dict[str, Any]], header: str = "") -> str:
    """The objects as one multi-document YAML stream, in the order given (kubectl apply -f -)."""
    body = yaml.dump_all(objects, Dumper=_Written, sort_keys=False, width=float("inf"), default_flow_style=False)
    return header + body
