"""`repro run --kubernetes-job N`: load past one machine, as an Indexed Job of N pods.

Each pod runs `repro run` with the user's flags and `--shard env/N`: Kubernetes numbers the pods
of an Indexed Job 0 .. N-1 and sets JOB_COMPLETION_INDEX in each, which repro reads as K, so pod
K drives the Kth slice of the conversations (the split `--workers` makes) and the N pods together
drive what one run would. Each writes its run folder, shard-K, to one volume shared by all: a
PersistentVolumeClaim (ReadWriteMany) printed with the Job, or one the user names. `repro report`
merges the folders into one report and one judgement (docs/kubernetes.md says how to gather them).

A pod that fails is not run again (backoffLimit 0): a second try would drive its conversations
twice against the stack, and the folder of the first is kept, not overwritten.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from repro.reporting.kubernetes_pod import container_security, labels, pod_security, resources
from repro.reporting.kubernetes_watch import api_key_env

RUNS_DIR = "/var/lib/repro/runs"
DEADLINE_MARGIN_S = 300


@dataclass(frozen=True)
class ShardJob:
    name: str
    namespace: str
    image: str
    shards: int
    args: list[str]  # the user's flags for `repro run`
    claim: str | None = None  # an existing PersistentVolumeClaim; None: one is printed
    claim_size: str = "1Gi"
    run_timeout_s: float = 3600.0  # the run's own deadline (--run-timeout)

    @property
    def claim_name(self) -> str:
        return self.claim or f"{self.name}-runs"

    @property
    def out(self) -> str:
        """Where the shards write their folders (shard-0 .. shard-N-1): one folder per Job."""
        return f"{RUNS_DIR}/{self.name}"


def job_manifests(job: ShardJob) -> list[dict[str, Any]]:
    """The claim for the run folders (unless one was named) and the Indexed Job."""
    objects = [] if job.claim else [claim(job)]
    return [*objects, indexed_job(job)]


def claim(job: ShardJob) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": job.claim_name, "namespace": job.namespace, "labels": labels("run", job.name)},
        # ReadWriteMany: the N pods may run on N nodes at once, all writing their folders to it.
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": job.claim_size}}},
    }


def indexed_job(job: ShardJob) -> dict[str, Any]:
    container = {
        "name": "repro-run",
        "image": job.image,
        "command": ["repro"],
        "args": ["run", *job.args, "--shard", f"env/{job.shards}", "--out", job.out],
        "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}, *api_key_env()],
        "resources": resources("1", "512Mi"),
        "securityContext": container_security(),
        "volumeMounts": [{"name": "runs", "mountPath": RUNS_DIR}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job.name, "namespace": job.namespace, "labels": labels("run", job.name)},
        "spec": {
            "completionMode": "Indexed",
            "completions": job.shards,
            "parallelism": job.shards,  # all at once: the load is the N pods together
            "backoffLimit": 0,
            # Kubernetes' own bound on a pod the run's deadline did not end: that deadline, plus the
            # start (an image pulled, an interpreter) and the end (verdicts judged, segments merged).
            "activeDeadlineSeconds": math.ceil(job.run_timeout_s) + DEADLINE_MARGIN_S,
            "template": {
                "metadata": {"labels": labels("run", job.name)},
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": pod_security(),
                    "containers": [container],
                    "volumes": [{"name": "runs", "persistentVolumeClaim": {"claimName": job.claim_name}},
                                {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
                },
            },
        },
    }
