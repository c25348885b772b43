"""Static checks of deploy/: the image, the compose file and the Kubernetes manifests.

No container engine or Kubernetes API runs here, so these tests check what can be checked
offline: the compose file against the Compose specification (check-jsonschema's vendored
copy), every built-in Kubernetes resource against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict: unknown fields fail), the Strimzi resources against a
structural schema of the fields we rely on plus cross-resource rules (node pool ↔ cluster,
replicas ≤ partitions, per-tenant prefixed ACLs), and that every command and setting the
files name exists in this build.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S_BASE = DEPLOY / "k8s" / "base"
COMPOSE = DEPLOY / "compose" / "compose.yaml"
K8S_VERSION = "1.33.0"
STRIMZI_KINDS = {"Kafka", "KafkaNodePool", "KafkaTopic", "KafkaUser"}

# Settings the manifests pass that the code of another in-flight change reads (SASL/SCRAM
# client credentials and the dashboard token, issue #10). The test below fails as soon as
# the code reads one of them, so this list can only shrink.
PENDING_SETTINGS: set[str] = set()


def k8s_docs(directory: Path = K8S_BASE) -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for path in sorted(directory.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((path, doc))
    return out


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in k8s_docs() if doc["kind"] == kind]


# -- compose ---------------------------------------------------------------------------------

def test_compose_file_conforms_to_the_compose_specification() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
         str(COMPOSE)], capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_schema_check_rejects_a_broken_file(tmp_path: Path) -> None:
    """The check above would notice a mistake: an unknown service key fails it."""
    broken = tmp_path / "compose.yaml"
    broken.write_text("services:\n  worker:\n    image: x\n    restart_policy: always\n")
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
         str(broken)], capture_output=True, text=True,
    )
    assert done.returncode == 1
    assert "restart_policy" in done.stdout + done.stderr


def test_compose_starts_the_apps_after_topics_and_checks_every_long_running_service() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    services = spec["services"]
    assert {"kafka", "redis", "topics", "worker", "compactor", "dashboard"} <= set(services)
    for name in ("worker", "compactor", "dashboard"):
        deps = services[name]["depends_on"]
        assert deps["topics"]["condition"] == "service_completed_successfully", name
        assert "healthcheck" in services[name], name
    assert services["topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    for name in ("kafka", "redis"):
        assert "healthcheck" in services[name], name
    kafka_env = services["kafka"]["environment"]
    assert kafka_env["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, no ZooKeeper


# -- Kubernetes ------------------------------------------------------------------------------

def test_kustomization_lists_exactly_the_manifests_in_its_directory() -> None:
    kust = yaml.safe_load((K8S_BASE / "kustomization.yaml").read_text())
    listed = set(kust["resources"])
    present = {p.name for p in K8S_BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present
    overlay = DEPLOY / "k8s" / "overlays" / "production"
    okust = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    for patch in okust.get("patches", []):
        assert (overlay / patch["path"]).is_file(), patch


@pytest.mark.parametrize("path,doc", [
    pytest.param(p, d, id=f"{p.name}:{d['kind']}/{d['metadata']['name']}")
    for p, d in k8s_docs() if d["kind"] not in STRIMZI_KINDS
])
def test_builtin_resource_is_valid_against_the_kubernetes_schema(
    path: Path, doc: dict[str, Any]
) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_kubernetes_validation_rejects_an_unknown_field() -> None:
    """Strict validation is really on: a typo in a container spec fails it."""
    doc = by_kind("Deployment")[0]
    bad = yaml.safe_load(yaml.safe_dump(doc))
    bad["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


# The Strimzi CRD fields this deployment relies on (a structural subset of the v1beta2 CRDs).
_META = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string"}, "labels": {"type": "object"},
    "annotations": {"type": "object"}}}
_CLUSTER_LABEL = {"type": "object", "required": ["labels"], "properties": {"labels": {
    "type": "object", "required": ["strimzi.io/cluster"]}}}
_ACL_RESOURCE = {"type": "object", "required": ["type"], "additionalProperties": False,
                 "properties": {
                     "type": {"enum": ["topic", "group", "cluster", "transactionalId"]},
                     "name": {"type": "string"},
                     "patternType": {"enum": ["literal", "prefix"]}}}
_ACL = {"type": "object", "required": ["resource", "operations"], "additionalProperties": False,
        "properties": {
            "resource": _ACL_RESOURCE,
            "operations": {"type": "array", "items": {"enum": [
                "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
                "AlterConfigs", "DescribeConfigs", "IdempotentWrite", "All"]}},
            "host": {"type": "string"}}}
STRIMZI_SCHEMAS: dict[str, dict[str, Any]] = {
    "Kafka": {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
              "properties": {"metadata": _META, "spec": {
                  "type": "object", "required": ["kafka"], "additionalProperties": False,
                  "properties": {"kafka": {
                      "type": "object", "required": ["listeners"],
                      "additionalProperties": False,
                      "properties": {
                          "version": {"type": "string"}, "metadataVersion": {"type": "string"},
                          "listeners": {"type": "array", "minItems": 1, "items": {
                              "type": "object", "required": ["name", "port", "type", "tls"],
                              "additionalProperties": False, "properties": {
                                  "name": {"type": "string", "pattern": "^[a-z0-9]{1,11}$"},
                                  "port": {"type": "integer", "minimum": 9092},
                                  "type": {"enum": ["internal", "route", "loadbalancer",
                                                    "nodeport", "ingress", "cluster-ip"]},
                                  "tls": {"type": "boolean"},
                                  "authentication": {"type": "object", "properties": {
                                      "type": {"enum": ["tls", "scram-sha-512", "oauth",
                                                        "custom"]}}}}}},
                          "authorization": {"type": "object", "required": ["type"]},
                          "config": {"type": "object"}}},
                      "entityOperator": {"type": "object"},
                      "cruiseControl": {"type": "object"}}}}},
    "KafkaNodePool": {"type": "object", "required": ["metadata", "spec"], "properties": {
        "metadata": _CLUSTER_LABEL, "spec": {
            "type": "object", "required": ["replicas", "roles", "storage"],
            "additionalProperties": False, "properties": {
                "replicas": {"type": "integer", "minimum": 1},
                "roles": {"type": "array", "items": {"enum": ["controller", "broker"]}},
                "storage": {"type": "object", "required": ["type"]},
                "resources": {"type": "object"}}}}},
    "KafkaTopic": {"type": "object", "required": ["metadata", "spec"], "properties": {
        "metadata": _CLUSTER_LABEL, "spec": {
            "type": "object", "required": ["partitions", "replicas", "config"],
            "additionalProperties": False, "properties": {
                "partitions": {"type": "integer", "minimum": 1},
                "replicas": {"type": "integer", "minimum": 1, "maximum": 32767},
                "topicName": {"type": "string"}, "config": {"type": "object"}}}}},
    "KafkaUser": {"type": "object", "required": ["metadata", "spec"], "properties": {
        "metadata": _CLUSTER_LABEL, "spec": {
            "type": "object", "required": ["authentication", "authorization"],
            "additionalProperties": False, "properties": {
                "authentication": {"type": "object", "properties": {
                    "type": {"enum": ["tls", "tls-external", "scram-sha-512"]}}},
                "authorization": {"type": "object", "required": ["type", "acls"],
                                  "properties": {"acls": {"type": "array",
                                                          "items": _ACL}}}}}}},
}


@pytest.mark.parametrize("doc", [
    pytest.param(d, id=f"{d['kind']}/{d['metadata']['name']}")
    for _, d in k8s_docs() if d["kind"] in STRIMZI_KINDS
])
def test_strimzi_resource_matches_the_structural_schema(doc: dict[str, Any]) -> None:
    assert doc["apiVersion"] == "kafka.strimzi.io/v1beta2"
    jsonschema.validate(doc, STRIMZI_SCHEMAS[doc["kind"]])


def test_strimzi_schema_rejects_a_misspelt_topic_field() -> None:
    topic = yaml.safe_load(yaml.safe_dump(by_kind("KafkaTopic")[0]))
    topic["spec"]["replica"] = topic["spec"].pop("replicas")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(topic, STRIMZI_SCHEMAS["KafkaTopic"])


def test_kafka_cluster_is_kraft_with_three_nodes_and_durable_defaults() -> None:
    [kafka] = by_kind("Kafka")
    assert kafka["metadata"]["annotations"] == {"strimzi.io/node-pools": "enabled",
                                                "strimzi.io/kraft": "enabled"}
    pools = by_kind("KafkaNodePool")
    assert all(p["metadata"]["labels"]["strimzi.io/cluster"] == kafka["metadata"]["name"]
               for p in pools)
    assert sum(p["spec"]["replicas"] for p in pools if "broker" in p["spec"]["roles"]) >= 3
    controllers = sum(p["spec"]["replicas"] for p in pools if "controller" in p["spec"]["roles"])
    assert controllers % 2 == 1  # a KRaft quorum needs an odd number of voters
    config = kafka["spec"]["kafka"]["config"]
    assert config["min.insync.replicas"] == 2
    assert config["offsets.topic.replication.factor"] == 3
    assert config["auto.create.topics.enable"] is False
    listeners = kafka["spec"]["kafka"]["listeners"]
    assert all(lst["authentication"]["type"] == "scram-sha-512" for lst in listeners)
    assert kafka["spec"]["kafka"]["authorization"]["type"] == "simple"


def test_topics_are_an_unexpirable_log_replicated_three_times() -> None:
    [kafka] = by_kind("Kafka")
    for topic in by_kind("KafkaTopic"):
        assert topic["metadata"]["labels"]["strimzi.io/cluster"] == kafka["metadata"]["name"]
        spec = topic["spec"]
        assert spec["replicas"] == 3
        assert spec["config"]["min.insync.replicas"] == 2
        assert spec["config"]["cleanup.policy"] == "delete"
        assert spec["config"]["retention.ms"] == -1


def test_worker_replicas_never_exceed_the_events_topic_partitions() -> None:
    partitions = {t["metadata"]["name"]: t["spec"]["partitions"] for t in by_kind("KafkaTopic")}
    [cm] = [d for d in by_kind("ConfigMap") if d["metadata"]["name"] == "sessionstream"]
    tenant = cm["data"]["SESSIONSTREAM_TENANT"]
    events = partitions[f"sessionstream.{tenant}.events"]
    assert int(cm["data"]["SESSIONSTREAM_PARTITIONS"]) == events
    [worker] = [d for d in by_kind("StatefulSet") if d["metadata"]["name"] == "worker"]
    assert worker["spec"]["replicas"] <= events
    overlay = yaml.safe_load(
        (DEPLOY / "k8s" / "overlays" / "production" / "worker-replicas.yaml").read_text())
    assert overlay["spec"]["replicas"] <= events
    pdbs = [d for d in by_kind("PodDisruptionBudget")
            if d["spec"]["selector"] == worker["spec"]["selector"]]
    assert pdbs, "the worker has no PodDisruptionBudget"


def test_each_worker_replica_has_a_stable_instance_id_of_its_own() -> None:
    """Static membership (ADR 0020): in Kubernetes the StatefulSet's pod name is the id
    (stable across restarts, unique per replica); Compose sets none, so each replica
    derives its own from its container's host name (a fixed value would be shared by
    every replica of `--scale` and fence the others)."""
    [worker] = [d for d in by_kind("StatefulSet") if d["metadata"]["name"] == "worker"]
    [service] = [d for d in by_kind("Service") if d["metadata"]["name"] ==
                 worker["spec"]["serviceName"]]
    assert service["spec"]["clusterIP"] == "None"
    [c] = worker["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["SESSIONSTREAM_WORKER_INSTANCE"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.name"}}
    overlay = yaml.safe_load(
        (DEPLOY / "k8s" / "overlays" / "production" / "worker-replicas.yaml").read_text())
    assert overlay["kind"] == "StatefulSet" and overlay["metadata"]["name"] == "worker"
    spec = yaml.safe_load(COMPOSE.read_text())
    assert "SESSIONSTREAM_WORKER_INSTANCE" not in spec["services"]["worker"]["environment"]


def test_every_kafka_user_is_confined_to_its_tenants_prefixes() -> None:
    [cm] = [d for d in by_kind("ConfigMap") if d["metadata"]["name"] == "sessionstream"]
    tenant = cm["data"]["SESSIONSTREAM_TENANT"]
    users = by_kind("KafkaUser")
    assert {u["metadata"]["name"] for u in users} >= {f"{tenant}-writer", f"{tenant}-worker"}
    for user in users:
        assert user["metadata"]["name"].startswith(f"{tenant}-")
        for acl in user["spec"]["authorization"]["acls"]:
            res = acl["resource"]
            if res["type"] == "topic":
                assert res["name"].startswith(f"sessionstream.{tenant}."), acl
                if res.get("patternType") == "prefix":
                    assert res["name"] == f"sessionstream.{tenant}.", acl
            elif res["type"] == "group":
                assert res["name"].startswith("sessionstream-"), acl
            else:
                assert acl["operations"] == ["IdempotentWrite"], acl


def test_every_deployment_has_probes_limits_and_runs_as_non_root() -> None:
    for dep in by_kind("Deployment") + by_kind("StatefulSet"):
        pod = dep["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, dep["metadata"]["name"]
        for c in pod["containers"]:
            assert "readinessProbe" in c and "livenessProbe" in c, c["name"]
            assert "memory" in c["resources"]["limits"], c["name"]


# -- what the files name exists in this build -----------------------------------------------

def _container_commands() -> list[list[str]]:
    commands = []
    spec = yaml.safe_load(COMPOSE.read_text())
    for svc in spec["services"].values():
        if str(svc.get("image", "")).startswith("sessionstream"):
            commands.append(list(svc["command"]))
    for dep in by_kind("Deployment") + by_kind("StatefulSet"):
        for c in dep["spec"]["template"]["spec"]["containers"]:
            if c["image"].startswith("sessionstream"):
                commands.append(list(c["args"]))
    return commands


@pytest.mark.parametrize("argv", _container_commands(), ids=" ".join)
def test_container_command_is_a_real_cli_command(argv: list[str]) -> None:
    from sessionstream.cli.main import main

    # --help after the options: click parses (and rejects) every option before helping.
    result = CliRunner().invoke(main, [*argv, "--help"])
    assert result.exit_code == 0, result.output


def _settings_named_in_deploy() -> set[str]:
    names: set[str] = set()
    for path in [COMPOSE, *DEPLOY.glob("k8s/**/*.yaml"), ROOT / "Dockerfile"]:
        names |= set(re.findall(r"SESSIONSTREAM_[A-Z_]+", path.read_text()))
    return names


def _settings_read_by_code() -> set[str]:
    names: set[str] = set()
    for pkg in ("sessionstream", "producers", "streams", "dashboard"):
        for path in (ROOT / pkg).rglob("*.py"):
            names |= set(re.findall(r"SESSIONSTREAM_[A-Z_]+", path.read_text()))
    return names


def test_every_setting_the_deploy_files_pass_is_read_by_the_code() -> None:
    named = _settings_named_in_deploy()
    read = _settings_read_by_code()
    assert named - read - PENDING_SETTINGS == set()
    assert PENDING_SETTINGS & read == set(), "now read by the code: drop from PENDING_SETTINGS"


def test_dockerfile_builds_one_non_root_image_with_the_cli_as_entrypoint() -> None:
    text = (ROOT / "Dockerfile").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[-1] == 'CMD ["--help"]'
    assert 'ENTRYPOINT ["sessionstream"]' in lines
    assert re.search(r"^USER 10001$", text, re.M)
    # Every folder the distribution ships (package-dir) and the native crate are copied
    # into the build stage.
    from tests.unit.layout import ROOT as REPO
    from tests.unit.layout import package_dirs

    for folder in [*package_dirs().values(), REPO / "native"]:
        pkg = folder.relative_to(REPO).as_posix()
        assert f"COPY {pkg} ./{pkg}" in text, pkg


def test_every_metric_the_grafana_dashboard_queries_is_one_a_component_exports() -> None:
    import json

    from prometheus_client import CollectorRegistry

    from sessionstream.dashboard.metrics import DashboardMetrics
    from sessionstream.streams.metrics import CompactorMetrics, WorkerMetrics

    registry = CollectorRegistry()
    WorkerMetrics("t", registry)
    CompactorMetrics("t", registry)
    DashboardMetrics("t", registry)
    exported = declared_series(registry)
    dash = json.loads((DEPLOY / "grafana" / "sessionstream.json").read_text())
    queried = {name for p in dash["panels"] for t in p["targets"]
               for name in re.findall(r"sessionstream_[a-z_]+", t["expr"])}
    assert queried and queried <= exported, queried - exported


#: The series names a collector of each type exposes (prometheus_client's families drop
#: the ``_total`` of a counter; a labelled gauge has no sample until a child is set).
_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum"),
             "summary": ("", "_count", "_sum")}


def declared_series(registry: Any) -> set[str]:
    """Every series name the registry's collectors declare, sampled yet or not."""
    return {fam.name + suffix for fam in registry.collect() for suffix in _SUFFIXES[fam.type]}


def test_declared_series_include_a_labelled_gauge_before_its_first_sample() -> None:
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()
    Gauge("x_lag", "a per-partition gauge, no partition measured", ["partition"],
          registry=registry)
    assert not [s for fam in registry.collect() for s in fam.samples]
    assert declared_series(registry) == {"x_lag"}


# -- Redis: no anonymous access, each process as its role's user ------------------------------

def _env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container.get("env", [])}


def _app_containers() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for dep in by_kind("Deployment") + by_kind("StatefulSet"):
        for c in dep["spec"]["template"]["spec"]["containers"]:
            if c["image"].startswith("sessionstream"):
                out.append((dep["metadata"]["name"], c))
    return out


#: The Redis role each long-running process connects as (docs/operations.md, "Principals").
APP_REDIS_ROLES = {"worker": "worker", "compactor": "writer", "dashboard": "reader"}


def _secret(name: str) -> dict[str, str]:
    [doc] = [d for d in by_kind("Secret") if d["metadata"]["name"] == name]
    data: dict[str, str] = doc["stringData"]
    return data


def test_k8s_redis_has_no_anonymous_user_and_the_acl_file_grants_what_the_code_grants() -> None:
    from urllib.parse import unquote, urlsplit

    from sessionstream.core.rows import KeySpace
    from sessionstream.governance.access import acl_password_hash, redis_acl_lines

    [redis_set] = [d for d in by_kind("StatefulSet") if d["metadata"]["name"] == "redis"]
    pod = redis_set["spec"]["template"]["spec"]
    [server] = pod["containers"]
    args = server["args"]
    acl_path = args[args.index("--aclfile") + 1]
    [mount] = [m for m in server["volumeMounts"] if acl_path.startswith(m["mountPath"] + "/")]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    acl = _secret(volume["secret"]["secretName"])[acl_path.rsplit("/", 1)[1]]
    lines = [ln.strip() for ln in acl.splitlines() if ln.strip()]
    assert lines[0] == "user default off"
    assert not [ln for ln in lines if ">" in ln.split("#")[0]]  # hashes only, no password
    [cm] = [d for d in by_kind("ConfigMap") if d["metadata"]["name"] == "sessionstream"]
    tenant = cm["data"]["SESSIONSTREAM_TENANT"]
    passwords = {}
    for role in ("writer", "worker", "reader"):
        url = urlsplit(_secret(f"sessionstream-redis-{role}")["url"])
        assert unquote(url.username or "") == f"sessionstream.{tenant}.{role}"
        passwords[role] = unquote(url.password or "")
    # the file's tenant users are the code's rules, with the hash of each URL's password
    tenant_lines = [ln for ln in lines if ln.startswith(f"user sessionstream.{tenant}.")]
    assert tenant_lines == redis_acl_lines(KeySpace(tenant, "ss"), passwords)
    assert acl_password_hash(passwords["reader"]) in acl


def test_every_k8s_process_connects_to_redis_as_its_role_with_the_tenant_key_from_a_secret(
) -> None:
    [cm] = [d for d in by_kind("ConfigMap") if d["metadata"]["name"] == "sessionstream"]
    assert "SESSIONSTREAM_REDIS_URL" not in cm["data"]  # no shared, anonymous URL
    assert cm["data"]["SESSIONSTREAM_KEY_STORE"] == "redis"
    seen = set()
    for name, container in _app_containers():
        if name not in APP_REDIS_ROLES:
            continue
        env = _env_of(container)
        ref = env["SESSIONSTREAM_REDIS_URL"]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == f"sessionstream-redis-{APP_REDIS_ROLES[name]}", name
        assert "url" in _secret(ref["name"])
        ring = env["SESSIONSTREAM_TENANT_KEY"]["valueFrom"]["secretKeyRef"]
        assert ring["key"] in _secret(ring["name"])
        seen.add(name)
    assert seen == set(APP_REDIS_ROLES)


def test_the_k8s_placeholders_are_accepted_by_the_settings_so_the_pods_start() -> None:
    from sessionstream.core.settings import Settings
    from sessionstream.governance.keys import TenantKeyRing

    token = _secret("sessionstream-dashboard")["token"]
    Settings.from_env({"SESSIONSTREAM_DASHBOARD_TOKEN": token})  # >= 16 characters
    TenantKeyRing.from_env_value(_secret("sessionstream-tenant-key")["ring"], "ring")
    for role in ("writer", "worker", "reader"):
        Settings.from_env({"SESSIONSTREAM_REDIS_URL": _secret(f"sessionstream-redis-{role}")[
            "url"]})


def test_compose_redis_has_no_anonymous_user_and_each_process_its_role() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    services = spec["services"]
    redis_cmd = services["redis"]["command"]
    acl_path = redis_cmd[redis_cmd.index("--aclfile") + 1]
    assert acl_path == "/run/secrets/redis_users"
    assert services["redis"]["secrets"] == ["redis_users"]
    assert "file" in spec["secrets"]["redis_users"]
    assert "SESSIONSTREAM_REDIS_URL" not in spec["x-sessionstream-env"]
    assert spec["x-sessionstream-env"]["SESSIONSTREAM_KEY_STORE"] == "redis"
    assert ":?" in spec["x-sessionstream-env"]["SESSIONSTREAM_TENANT_KEY"]  # required
    for name, role in APP_REDIS_ROLES.items():
        url = services[name]["environment"]["SESSIONSTREAM_REDIS_URL"]
        assert url.startswith(f"redis://sessionstream.${{SESSIONSTREAM_TENANT:-default}}.{role}:"
                              f"${{REDIS_{role.upper()}_PASSWORD:?"), name
    assert ":?" in services["dashboard"]["environment"]["SESSIONSTREAM_DASHBOARD_TOKEN"]
