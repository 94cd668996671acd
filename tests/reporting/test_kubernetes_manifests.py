"""The manifests `repro watch --kubernetes` and `repro run --kubernetes-job N` print, validated
offline: the core objects (Deployment, Service, Job, PersistentVolumeClaim) with kubernetes-validate
against Kubernetes 1.33's schemas, strict (an unknown field fails); the Prometheus operator's
ServiceMonitor and PrometheusRule by the validators of the npm package
@kubernetes-models/prometheus-operator (tests/support/prometheus_operator.py), which check types,
required fields and patterns but let an unknown field pass. And what the pods run: their arguments, read back by repro's own parser, are the watch
and the shards the user asked for."""

from __future__ import annotations

import contextlib
import copy
import io
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from repro.cli import build_parser, main
from repro.commands.run import settings_from_args
from repro.io.rotating_log import DEFAULT_SEGMENT_BYTES, MIB
from repro.load.shards import share_of
from repro.reporting.watch_rules import alert_rules
from tests.support import prometheus_operator

pytestmark = pytest.mark.timeout(60)

K8S_VERSION = "1.33.0"
OPERATOR_KINDS = ("ServiceMonitor", "PrometheusRule")
WATCH_FLAGS = ["--hop", "name=nginx,url=http://nginx.llm:8080,role=proxy",
               "--hop", "name=engine-0,url=http://sglang.llm:30000,role=engine",
               "--think", "2.5", "--rounds", "6", "--api", "responses", "--insecure", "--log-keep-mib", "512"]
RUN_FLAGS = ["--target", "http://sglang.llm:30000/v1", "--conversations", "7", "--rounds", "12",
             "--stall-after", "20", "--on-failure", "retire"]


def printed(*argv: str) -> list[dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    text = out.getvalue()
    assert text.startswith("# ") and all(len(line) <= 80 for line in text.splitlines() if line.startswith("#"))
    return list(yaml.safe_load_all(text))


def validate(obj: dict[str, Any]) -> None:
    if obj["kind"] in OPERATOR_KINDS:
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        prometheus_operator.validate(obj)
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


@pytest.mark.network  # node runs the operator's validators
def test_watch_manifests_validate_and_run_the_watch_asked_for():
    objects = printed("watch", "--kubernetes", *WATCH_FLAGS)
    assert [o["kind"] for o in objects] == ["Deployment", "Service", "ServiceMonitor", "PrometheusRule"]
    for obj in objects:
        validate(obj)
    kinds = by_kind(objects)
    deployment, service, monitor = kinds["Deployment"], kinds["Service"], kinds["ServiceMonitor"]
    pod = deployment["spec"]["template"]
    [container] = pod["spec"]["containers"]
    # The pod's watch is the one asked for: its arguments parse to the same flags, plus where it
    # listens (all addresses, for the Service) and where its log goes (the volume).
    asked = build_parser().parse_args(["watch", *WATCH_FLAGS])
    ran = build_parser().parse_args(container["args"])
    for name in ("hop", "think", "rounds", "api", "insecure", "log_keep_mib", "stall_after", "canary_every"):
        assert getattr(ran, name) == getattr(asked, name), name
    assert not ran.kubernetes and ran.listen == "0.0.0.0:9464"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert str(ran.out) == mounts["log"]
    log_volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "log")
    # The log's own bound: what it keeps (--log-keep-mib 512) and the segment being written.
    assert log_volume["emptyDir"]["sizeLimit"] == f"{512 + DEFAULT_SEGMENT_BYTES // MIB}Mi"
    # Probed on /metrics, on the port the container serves and the Service targets.
    [port] = container["ports"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": port["name"]}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and security["runAsNonRoot"] and not security["allowPrivilegeEscalation"]
    assert pod["spec"]["securityContext"]["runAsUser"] != 0
    assert container["resources"]["limits"]["memory"] == container["resources"]["requests"]["memory"]
    # Service -> pods, ServiceMonitor -> Service, by labels and port name; the job is the Service's name.
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    rules = kinds["PrometheusRule"]["spec"]["groups"][0]["rules"]
    assert rules == alert_rules(service["metadata"]["name"])
    assert not any("API_KEY" in arg for arg in container["args"])  # keys come from a Secret, never the args


@pytest.mark.network  # node runs the operator's validators
def test_watch_manifests_take_a_claim_a_job_name_and_a_namespace():
    objects = printed("watch", "--kubernetes", "--target", "http://gw.llm/v1", "--claim", "watch-log",
                      "--job", "canary-eu", "--namespace", "llm", "--image", "registry.local/repro:1")
    for obj in objects:
        validate(obj)
        assert obj["metadata"]["namespace"] == "llm" and obj["metadata"]["name"] == "canary-eu"
    pod = by_kind(objects)["Deployment"]["spec"]["template"]["spec"]
    assert {"name": "log", "persistentVolumeClaim": {"claimName": "watch-log"}} in pod["volumes"]
    assert pod["containers"][0]["image"] == "registry.local/repro:1"
    assert 'up{job="canary-eu"}' in yaml.safe_dump(by_kind(objects)["PrometheusRule"])


@pytest.mark.network  # node runs the operator's validators
def test_the_prometheus_rule_carries_the_canary_slo_of_the_objective_given():
    """--slo reaches the PrometheusRule (the canary SLO's group, tests/production/test_slo_rules.py)
    and not the pod: the watch itself takes no --slo."""
    from repro.reporting.watch_rules import rule_groups

    kinds = by_kind(printed("watch", "--kubernetes", "--slo", "0.995", *WATCH_FLAGS))
    validate(kinds["PrometheusRule"])
    name = kinds["Service"]["metadata"]["name"]
    assert kinds["PrometheusRule"]["spec"]["groups"] == rule_groups(name, slo=0.995)
    assert [g["name"] for g in kinds["PrometheusRule"]["spec"]["groups"]] == ["repro-watch", "repro-watch-slo"]
    assert "--slo" not in kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.network  # node runs the operator's validators
def test_the_validation_catches_a_wrong_field():
    """Not vacuous: a field misspelt in a core object fails, and so do a wrong type and a missing
    required field in the operator's objects. Their validators do not catch a misspelt field (an
    unknown field passes: `scrapeInterval` for `interval` would validate), so that is not tried."""
    kinds = by_kind(printed("watch", "--kubernetes", *WATCH_FLAGS))
    deployment = copy.deepcopy(kinds["Deployment"])
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)
    monitor = copy.deepcopy(kinds["ServiceMonitor"])
    monitor["spec"]["endpoints"][0]["interval"] = 30  # a duration is a string: "30s"
    with pytest.raises(prometheus_operator.InvalidOperatorObject) as caught:
        validate(monitor)
    assert {(p["path"], p["keyword"]) for p in caught.value.problems} == {("/spec/endpoints/0/interval", "type")}
    del monitor["spec"]["endpoints"][0]["interval"]
    del monitor["spec"]["selector"]
    with pytest.raises(prometheus_operator.InvalidOperatorObject) as caught:
        validate(monitor)
    assert {(p["path"], p["keyword"]) for p in caught.value.problems} == {("/spec", "required")}
    rule = copy.deepcopy(kinds["PrometheusRule"])
    rule["spec"]["groups"][0]["rules"][0]["for"] = "thirty seconds"
    with pytest.raises(prometheus_operator.InvalidOperatorObject) as caught:
        validate(rule)
    assert {(p["path"], p["keyword"]) for p in caught.value.problems} == {("/spec/groups/0/rules/0/for", "pattern")}


def test_the_indexed_job_validates_and_each_pod_drives_its_slice(monkeypatch):
    objects = printed("run", "--kubernetes-job", "3", *RUN_FLAGS)
    assert [o["kind"] for o in objects] == ["PersistentVolumeClaim", "Job"]
    for obj in objects:
        validate(obj)
    claim, job = objects
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 3
    assert spec["backoffLimit"] == 0  # a pod run twice would drive its slice twice
    assert spec["activeDeadlineSeconds"] > 3600  # the run's own deadline (the default) ends it first
    pod = spec["template"]["spec"]
    assert {"name": "runs", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}} in pod["volumes"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    [container] = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"]
    driven = []
    for index in range(3):  # what each pod runs, as Kubernetes numbers it
        monkeypatch.setenv("JOB_COMPLETION_INDEX", str(index))
        args = build_parser().parse_args(container["args"])
        assert (args.rounds, args.stall_after, args.on_failure) == (12, 20.0, "retire")
        args.model = "m"  # no discovery: the target is not here
        settings = settings_from_args(args)
        assert settings.driver.conversation_ids == share_of(tuple(range(7)), index, 3)
        assert settings.out == Path(f"/var/lib/repro/runs/repro-run/shard-{index}")
        driven += settings.driver.conversation_ids
    assert sorted(driven) == list(range(7))  # the pods together: every conversation, once


def test_a_named_claim_is_used_not_printed():
    objects = printed("run", "--kubernetes-job", "2", *RUN_FLAGS, "--claim", "shared-runs", "--name", "load-eu")
    [job] = objects
    validate(job)
    assert job["metadata"]["name"] == "load-eu"
    volumes = job["spec"]["template"]["spec"]["volumes"]
    assert {"name": "runs", "persistentVolumeClaim": {"claimName": "shared-runs"}} in volumes


@pytest.mark.parametrize(("argv", "names"), [
    (["run", "--kubernetes-job", "0", *RUN_FLAGS], "--kubernetes-job"),
    (["run", "--kubernetes-job", "8", *RUN_FLAGS], "--conversations 7"),
    (["run", "--kubernetes-job", "2", "--shard", "0/2", *RUN_FLAGS], "--shard"),
    (["run", "--kubernetes-job", "2", "--prompts", "p.jsonl", *RUN_FLAGS], "--prompts p.jsonl"),
    (["run", "--kubernetes-job", "2"], "--target"),
    (["run", "--kubernetes-job", "2", "--target", "http://gw/v1", "--conversations", "500"], "--allow-flood"),
    (["run", "--claim", "x"], "--claim"),
    (["watch", "--kubernetes", "--target", "http://gw/v1", "--listen", "0.0.0.0:1"], "--listen"),
    (["watch", "--kubernetes", "--topology", "stack.toml"], "--topology stack.toml"),
    (["watch", "--kubernetes"], "nothing to watch"),
    (["watch", "--image", "x", "--target", "http://gw/v1"], "--image"),
    (["watch", "--kubernetes", "--rules", "--target", "http://gw/v1"], "--kubernetes"),
])
def test_bad_kubernetes_input_is_one_line_and_exit_2(argv, names, capsys):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 2
    assert not out.getvalue()  # no half a manifest
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and names in err, err
