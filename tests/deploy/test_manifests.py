"""The deployment files, checked without a cluster or an engine.

Kubernetes manifests against the Kubernetes API schemas that kubernetes-validate
ships (offline, strict: an unknown field fails), the KEDA ScaledObject against
the CRD's own schema (vendored in schemas/, see its $comment), the manifests
and the compose file against each other, the image and the load report, and the
KEDA demand query against a real database.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml
from psycopg import sql

from stint.lab.container import CONTAINER_IMAGE
from stint.postgres.scratch import ScratchTarget
from stint.store.pool import Pool
from tests.deploy import engine
from tests.workers import fetch

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
SCHEMAS = Path(__file__).parent / "schemas"
KEDA_SCHEMA = SCHEMAS / "keda-scaledobject-v1alpha1.json"
# The custom resources' schemas, vendored (each file's $comment names its source).
CRD_SCHEMAS = {
    ("keda.sh/v1alpha1", "ScaledObject"): KEDA_SCHEMA,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SCHEMAS / "servicemonitor-v1.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): SCHEMAS / "podmonitor-v1.json",
    ("postgresql.cnpg.io/v1", "Cluster"): SCHEMAS / "cnpg-cluster-v1.json",
}
CUSTOM_GROUPS = {"keda.sh", "monitoring.coreos.com", "postgresql.cnpg.io"}
OVERLAYS = sorted(p.parent for p in (DEPLOY / "overlays").glob("*/kustomization.yaml"))
KUBECTL = shutil.which("kubectl")
# The oldest Kubernetes with every field used here (policy/v1 PDBs, startup probes,
# sizeLimit) that kubernetes-validate still ships, and the newest it ships.
KUBE_VERSIONS = ["1.25.0", kubernetes_validate.utils.latest_version()]


def _manifests() -> dict[str, dict[str, Any]]:
    """Every resource the kustomization applies, by ``kind/name``."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    found = {}
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            found[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return found


MANIFESTS = _manifests()


def _worker() -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """The worker Deployment, its container, and the container's literal env."""
    deployment = MANIFESTS["Deployment/stint-worker"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    return deployment, container, env


def _pod(name: str) -> dict[str, Any]:
    """The pod spec of a Deployment, Job or CronJob."""
    spec = MANIFESTS[name]["spec"]
    if "jobTemplate" in spec:
        spec = spec["jobTemplate"]["spec"]
    pod: dict[str, Any] = spec["template"]["spec"]
    return pod


def _database_key(name: str) -> str:
    """The Secret key a workload's one container reads its database URL from:
    STINT_DATABASE_URL_FILE, through the volume mounted there, to the one key that
    volume projects (or a secretKeyRef on STINT_DATABASE_URL)."""
    pod = _pod(name)
    [container] = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    secret = MANIFESTS["Secret/stint-database"]["metadata"]["name"]
    if "STINT_DATABASE_URL" in env:
        assert "STINT_DATABASE_URL_FILE" not in env, f"{name}: both URL variables"
        ref = env["STINT_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret
        return str(ref["key"])
    path = PurePosixPath(env["STINT_DATABASE_URL_FILE"]["value"])
    [mount] = [
        m for m in container.get("volumeMounts", []) if path.parent == PurePosixPath(m["mountPath"])
    ]
    assert mount.get("readOnly") is True, f"{name}: the secret is mounted writable"
    volumes = {v["name"]: v for v in pod["volumes"]}
    source = volumes[mount["name"]]["secret"]
    assert source["secretName"] == secret, f"{name}: {source}"
    # Only the key it needs: the other role's URL is not in the pod at all.
    [item] = source["items"]
    assert item["path"] == path.name, f"{name}: {item} is not {path}"
    # 0400 readable by the pod's user: the kubelet gives the file the pod's fsGroup.
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"]
    return str(item["key"])


def _secret_user(key: str) -> str:
    url: str = MANIFESTS["Secret/stint-database"]["stringData"][key]
    user = urlsplit(url).username
    assert user, f"the Secret's {key} names no user"
    return user


def _strict(schema: Any) -> Any:
    """The schema with unknown fields refused, as the API server's strict field
    validation (kubectl's default) refuses them."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [_strict(v) for v in schema]
    return schema


def _keda_validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(_strict(json.loads(KEDA_SCHEMA.read_text())))


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)s", value)
    assert match, f"compose durations here are whole seconds: {value!r}"
    return float(match.group(1))


# --------------------------------------------------------------------------- schemas


def test_the_kustomization_applies_every_manifest() -> None:
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(MANIFESTS) == {
        "Namespace/stint",
        "Secret/stint-database",
        "PersistentVolumeClaim/stint-workspace",
        "Job/stint-migrate",
        "CronJob/stint-prune",
        "Deployment/stint-worker",
        "PodDisruptionBudget/stint-worker",
        "TriggerAuthentication/stint-database",
        "ScaledObject/stint-worker",
        "Deployment/stint-api",
        "Service/stint-api",
        "PodDisruptionBudget/stint-api",
        "HorizontalPodAutoscaler/stint-api",
        "NetworkPolicy/stint-worker",
        "NetworkPolicy/stint-api",
        "NetworkPolicy/stint-jobs",
        "PodMonitor/stint-worker",
        "ServiceMonitor/stint-api",
    }


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_kubernetes_kinds_validate_against_the_api_schemas(version: str) -> None:
    for name, doc in MANIFESTS.items():
        if _is_custom(doc):
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name} against Kubernetes {version}: {exc.message} at {list(exc.path)}")


def test_an_unknown_field_fails_validation() -> None:
    deployment = copy.deepcopy(MANIFESTS["Deployment/stint-worker"])
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSIONS[-1], strict=True)


def test_the_scaled_object_validates_against_the_keda_crd_schema() -> None:
    validator = _keda_validator()
    scaled = MANIFESTS["ScaledObject/stint-worker"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(scaled)]
    assert errors == []
    # The schema bites: a misspelt field and a non-string trigger value are refused.
    typo = copy.deepcopy(scaled)
    typo["spec"]["minReplicas"] = 0
    assert not validator.is_valid(typo)
    number = copy.deepcopy(scaled)
    number["spec"]["triggers"][0]["metadata"]["targetQueryValue"] = 4
    assert not validator.is_valid(number)


# --------------------------------------------------------------------------- agreement


def test_the_worker_deployment_drains_within_its_grace_and_probes_its_health_port() -> None:
    deployment, container, env = _worker()
    pod = deployment["spec"]["template"]["spec"]
    drain = float(env["STINT_DRAIN_SECONDS"])
    assert pod["terminationGracePeriodSeconds"] >= drain + 10  # drain + hand-back margin
    assert "replicas" not in deployment["spec"]  # KEDA owns the count
    assert env["STINT_AUTO_MIGRATE"] == "false"  # the Job migrates

    [port] = container["ports"]
    assert port["name"] == "health" and str(port["containerPort"]) == env["STINT_HEALTH_PORT"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["startupProbe"]["httpGet"]["path"] == "/livez"
    # Liveness fails only after the lease is gone: its threshold spans more than a lease.
    liveness = container["livenessProbe"]
    lease = float(env["STINT_LEASE_SECONDS"])
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= lease

    # The slot count is stated once: the kubelet expands $(STINT_SLOTS) in args.
    assert container["args"] == ["--slots", "$(STINT_SLOTS)"]
    assert "STINT_WORKER_ID" not in {e["name"] for e in container["env"]}  # see the manifest


def test_the_pods_run_as_the_images_non_root_user() -> None:
    uid = re.search(r"^ARG STINT_UID=(\d+)$", (DEPLOY / "Dockerfile").read_text(), re.M)
    assert uid is not None
    for name in (
        "Deployment/stint-worker",
        "Deployment/stint-api",
        "Job/stint-migrate",
        "CronJob/stint-prune",
    ):
        pod = _pod(name)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == int(uid.group(1))
        for container in pod["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_worker_resources_come_from_the_load_report() -> None:
    _, container, env = _worker()
    matrix = json.loads((ROOT / "docs" / "load" / "matrix.json").read_text())
    [measured] = [
        c
        for c in matrix["sizing"]["harnesses"]["scripted"]["configurations"]
        if (c["workers"], c["slots"]) == (1, int(env["STINT_SLOTS"]))
    ]
    mib = {"Mi": 1, "Gi": 1024}
    request, limit = (container["resources"][kind]["memory"] for kind in ("requests", "limits"))
    request_mib = int(request[:-2]) * mib[request[-2:]]
    limit_mib = int(limit[:-2]) * mib[limit[-2:]]
    assert measured["peak_rss_mib_per_worker"][1] <= request_mib <= limit_mib
    assert "cpu" not in container["resources"]["limits"]


def test_the_references_between_manifests_resolve() -> None:
    deployment, container, _ = _worker()
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    pdb = MANIFESTS["PodDisruptionBudget/stint-worker"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert "minAvailable" not in pdb["spec"]  # it would block drains at zero replicas

    secret = MANIFESTS["Secret/stint-database"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    claim = volumes["workspace"]["persistentVolumeClaim"]["claimName"]
    assert f"PersistentVolumeClaim/{claim}" in MANIFESTS
    assert volumes["database-url"]["secret"]["secretName"] == secret["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["workspace"] == "/var/lib/stint/workspace"  # the image's STINT_WORKSPACE

    job = MANIFESTS["Job/stint-migrate"]["spec"]["template"]["spec"]["containers"][0]
    assert job["command"] == ["/opt/stint/bin/stint", "migrate"]
    [prune] = _pod("CronJob/stint-prune")["containers"]
    assert prune["command"] == ["/opt/stint/bin/stint", "prune"]


def test_the_owner_migrates_and_prunes_and_the_workers_log_in_as_the_app_role() -> None:
    """docs/guide/security.md, "Database roles": one Secret key per role; each pod mounts
    its own."""
    secret = MANIFESTS["Secret/stint-database"]
    assert set(secret["stringData"]) == {"owner-url", "app-url"}
    assert _database_key("Job/stint-migrate") == "owner-url"
    assert _database_key("CronJob/stint-prune") == "owner-url"
    assert _database_key("Deployment/stint-worker") == "app-url"
    assert _database_key("Deployment/stint-api") == "app-url"
    owner, app = _secret_user("owner-url"), _secret_user("app-url")
    assert owner != app
    # The migration grants the app role (the app URL's user) its privileges ...
    [migrate] = _pod("Job/stint-migrate")["containers"]
    migrate_env = {e["name"]: e.get("value") for e in migrate["env"]}
    assert migrate_env["STINT_APP_ROLE"] == app
    # ... and no worker migrates (nor could: the app role may not run DDL).
    _, _, env = _worker()
    assert env["STINT_AUTO_MIGRATE"] == "false"
    assert "STINT_APP_ROLE" not in env


def test_the_keda_scaler_reads_the_app_url_through_a_trigger_authentication() -> None:
    [trigger] = MANIFESTS["ScaledObject/stint-worker"]["spec"]["triggers"]
    assert "connectionFromEnv" not in trigger["metadata"]  # the workers' env has no URL
    ref = trigger["authenticationRef"]
    assert ref.get("kind", "TriggerAuthentication") == "TriggerAuthentication"
    auth = MANIFESTS[f"TriggerAuthentication/{ref['name']}"]
    assert auth["apiVersion"] == "keda.sh/v1alpha1"
    # KEDA's TriggerAuthentication spec (no vendored schema for it): secretTargetRef
    # entries of parameter, name and key, and nothing else here.
    assert set(auth) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(auth["spec"]) == {"secretTargetRef"}
    [target] = auth["spec"]["secretTargetRef"]
    assert set(target) == {"parameter", "name", "key"}
    assert all(isinstance(v, str) for v in target.values())
    # The postgresql scaler's connection string, from the app role's key.
    assert target["parameter"] == "connection"
    assert target["name"] == MANIFESTS["Secret/stint-database"]["metadata"]["name"]
    assert target["key"] == "app-url"


def test_keda_scales_the_worker_deployment_on_demand_per_slot() -> None:
    deployment, _, env = _worker()
    scaled = MANIFESTS["ScaledObject/stint-worker"]["spec"]
    assert scaled["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert scaled["minReplicaCount"] == 0  # parked sessions hold no pod
    [trigger] = scaled["triggers"]
    assert trigger["type"] == "postgresql"
    meta = trigger["metadata"]
    assert meta["targetQueryValue"] == env["STINT_SLOTS"]  # pods = demand / slots
    # Only the demand these (unpinned) workers can serve: a pinned session is another's.
    assert "STINT_PINS" not in env
    assert meta["query"].count("pin IS NULL") == 2
    # A scaler that cannot read the demand leaves a floor of pods, not whatever was.
    assert scaled["fallback"]["replicas"] >= 1
    assert set(trigger["authenticationRef"]) == {"name"}  # see the next test
    statuses = set(re.findall(r"status = '(\w+)'", meta["query"]))
    assert statuses == {"ready", "running"}
    migration = (ROOT / "migrations" / "0001_init.sql").read_text()
    assert "CHECK (status IN ('idle', 'ready', 'running', 'parked', 'closed'))" in migration


async def test_the_keda_query_counts_ready_and_running_sessions(
    db: ScratchTarget, pool: Pool
) -> None:
    """Demand is ready sessions whose ready_at has come, plus running ones: a
    session deferred to a later ready_at (waiting for quota) holds no pod."""
    rows = {
        "idle": "",
        "ready": ", ready_at",
        "deferred": ", ready_at",
        "running": ", lease_owner, lease_expires_at",
        "parked": "",
        "closed": "",
    }
    values = {
        "idle": "",
        "ready": ", now()",
        "deferred": ", now() + interval '1 minute'",
        "running": ", 'w', now() + interval '1 minute'",
        "parked": "",
        "closed": "",
    }
    counts = {"idle": 1, "ready": 2, "deferred": 4, "running": 3, "parked": 5, "closed": 1}
    # Pinned sessions are the demand of workers with that pin, not of these.
    for status in ("ready", "running"):
        async with pool.connection() as conn:
            await conn.execute(
                sql.SQL(
                    "INSERT INTO sessions (status, pin, ready_at, lease_owner, lease_expires_at) "
                    "VALUES ({}, 'v2', now(), {}, {})"
                ).format(
                    sql.Literal(status),
                    sql.Literal("w" if status == "running" else None),
                    sql.SQL("now() + interval '1 minute'" if status == "running" else "NULL"),
                )
            )
    for status, n in counts.items():
        insert = sql.SQL("INSERT INTO sessions (status{}) VALUES ({}{}) RETURNING id").format(
            sql.SQL(rows[status]),
            sql.Literal("ready" if status == "deferred" else status),
            sql.SQL(values[status]),
        )
        for _ in range(n):
            async with pool.connection() as conn:
                await conn.execute(insert)
    query = MANIFESTS["ScaledObject/stint-worker"]["spec"]["triggers"][0]["metadata"]["query"]
    query = query.replace("stint.sessions", f"{db.config.schema}.sessions")
    assert await fetch(pool, query) == [(5,)]


# --------------------------------------------------------------------------- compose


def test_the_compose_file_migrates_first_and_stops_after_the_drain() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "migrate", "worker", "api"}
    assert all(s["network_mode"] == "host" for s in services.values())
    assert services["postgres"]["image"] == CONTAINER_IMAGE
    assert services["migrate"]["image"] == services["worker"]["image"] == engine.WORKER_IMAGE

    migrate = services["migrate"]
    assert [*migrate["entrypoint"], *migrate["command"]] == ["/opt/stint/bin/stint", "migrate"]
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}

    worker = services["worker"]
    assert worker["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
    assert worker["command"] == ["--slots", "4"]
    env = worker["environment"]
    assert env["STINT_AUTO_MIGRATE"] == "false"
    assert _seconds(worker["stop_grace_period"]) >= float(env["STINT_DRAIN_SECONDS"]) + 10
    assert worker["volumes"] == ["workspace:/var/lib/stint/workspace"]
    # Host networking: no fixed health port, a port file the healthcheck reads.
    assert env["STINT_HEALTH_PORT"] == "0" and env["STINT_HEALTH_PORT_FILE"].startswith("/tmp/")
    assert worker["healthcheck"]["test"][-3:] == ["-m", "stint.worker.health", "livez"]

    api = services["api"]
    assert api["image"] == engine.WORKER_IMAGE
    assert [*api["entrypoint"], *api["command"]] == ["/opt/stint/bin/stint", "api"]
    assert api["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}


def _compose_login(url: str) -> tuple[str, str]:
    """The user and password of a compose URL, ${VAR:-default} left as written."""
    match = re.fullmatch(r"postgresql://(\w+):(\$\{[^}]+\})@[^/]+/stint", url)
    assert match, url
    return match.group(1), match.group(2)


def test_the_compose_file_migrates_as_the_owner_and_runs_as_the_app_role() -> None:
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    postgres = services["postgres"]["environment"]
    owner = _compose_login(services["migrate"]["environment"]["STINT_DATABASE_URL"])
    assert owner == (postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"])
    app = (postgres["POSTGRES_APP_USER"], postgres["POSTGRES_APP_PASSWORD"])
    assert app[0] != owner[0] and app[1] != owner[1]
    # The migration grants the app role that the postgres image created ...
    assert services["migrate"]["environment"]["STINT_APP_ROLE"] == app[0]
    # ... and the workers and the API log in as it, never migrating.
    for name in ("worker", "api"):
        env = services[name]["environment"]
        assert _compose_login(env["STINT_DATABASE_URL"]) == app, name
        assert "STINT_APP_ROLE" not in env
    assert services["worker"]["environment"]["STINT_AUTO_MIGRATE"] == "false"


def test_the_compose_postgres_is_probed_as_its_own_role_and_restarts() -> None:
    """pg_isready as POSTGRES_USER (as "postgres", a role that does not exist, it made
    the server log a FATAL at every probe), in the compose file and the image; the
    server restarts after a crash; the API's port is one setting, probed where it is."""
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    postgres = services["postgres"]
    [kind, probe] = postgres["healthcheck"]["test"]
    assert kind == "CMD-SHELL" and '-U "$$POSTGRES_USER"' in probe
    assert postgres["restart"] == "unless-stopped"
    image = (DEPLOY / "postgres.Dockerfile").read_text()
    assert '--username=\\"$POSTGRES_USER\\"' in image
    api = services["api"]
    assert api["environment"]["STINT_API_PORT"] == "${STINT_API_PORT:-8000}"
    assert 'os.environ[\\"STINT_API_PORT\\"]' in json.dumps(api["healthcheck"]["test"])


# --------------------------------------------------------------------------- the API, scraping


def test_the_api_is_a_deployment_behind_a_service_a_pdb_and_an_autoscaler() -> None:
    deployment = MANIFESTS["Deployment/stint-api"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert "replicas" not in deployment["spec"]  # the HPA owns the count
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["/opt/stint/bin/stint", "api"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    [port] = container["ports"]
    assert str(port["containerPort"]) == env["STINT_API_PORT"] and port["name"] == "http"
    assert env["STINT_API_HOST"] == "0.0.0.0"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    service = MANIFESTS["Service/stint-api"]["spec"]
    assert service["selector"].items() <= labels.items()
    assert [p["targetPort"] for p in service["ports"]] == ["http"]
    pdb = MANIFESTS["PodDisruptionBudget/stint-api"]["spec"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    hpa = MANIFESTS["HorizontalPodAutoscaler/stint-api"]["spec"]
    assert hpa["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert hpa["minReplicas"] > pdb["minAvailable"]  # a disruption always leaves one


def test_the_custom_resources_validate_against_their_crd_schemas() -> None:
    docs = [*MANIFESTS.values(), yaml.safe_load((K8S / "ha" / "cnpg-cluster.yaml").read_text())]
    seen = set()
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"])
        if key not in CRD_SCHEMAS:
            continue
        seen.add(key)
        validator = jsonschema.Draft7Validator(_strict(json.loads(CRD_SCHEMAS[key].read_text())))
        errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(doc)]
        assert errors == [], f"{key}: {errors}"
        typo = copy.deepcopy(doc)
        typo["spec"]["selectors"] = {}
        assert not validator.is_valid(typo), f"{key}: the schema does not bite"
    assert seen == set(CRD_SCHEMAS)


def test_prometheus_scrapes_the_workers_health_port_and_the_api_with_a_key() -> None:
    worker = MANIFESTS["Deployment/stint-worker"]["spec"]["template"]
    [endpoint] = MANIFESTS["PodMonitor/stint-worker"]["spec"]["podMetricsEndpoints"]
    pod_monitor = MANIFESTS["PodMonitor/stint-worker"]["spec"]["selector"]["matchLabels"]
    assert pod_monitor.items() <= worker["metadata"]["labels"].items()
    assert endpoint == {**endpoint, "port": "health", "path": "/metrics"}
    [api_endpoint] = MANIFESTS["ServiceMonitor/stint-api"]["spec"]["endpoints"]
    assert api_endpoint["port"] == "http" and api_endpoint["path"] == "/metrics"
    assert api_endpoint["authorization"]["credentials"]["name"] == "stint-metrics-key"


def test_network_policies_keep_the_health_and_metrics_ports_private() -> None:
    worker = MANIFESTS["Deployment/stint-worker"]["spec"]["template"]
    policy = MANIFESTS["NetworkPolicy/stint-worker"]["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= worker["metadata"]["labels"].items()
    [rule] = policy["ingress"]
    assert rule["ports"] == [{"port": "health", "protocol": "TCP"}]
    [source] = rule["from"]
    assert set(source) == {"namespaceSelector"}  # one namespace, not the whole cluster
    api = MANIFESTS["NetworkPolicy/stint-api"]["spec"]
    assert [r["ports"] for r in api["ingress"]] == [[{"port": "http", "protocol": "TCP"}]]
    jobs = MANIFESTS["NetworkPolicy/stint-jobs"]["spec"]
    assert "ingress" not in jobs and jobs["policyTypes"] == ["Ingress"]  # nothing comes in


def test_connection_strings_say_sslmode_and_the_image_tag_is_immutable() -> None:
    for key, url in MANIFESTS["Secret/stint-database"]["stringData"].items():
        assert "sslmode=" in url, key
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    [image] = kustomization["images"]
    assert image.get("newTag") not in (None, "latest") or "digest" in image


def test_the_cnpg_cluster_replicates_synchronously_and_makes_stints_roles() -> None:
    cluster = yaml.safe_load((K8S / "ha" / "cnpg-cluster.yaml").read_text())["spec"]
    assert cluster["instances"] >= 3
    synchronous = cluster["postgresql"]["synchronous"]
    assert synchronous["number"] >= 1 and synchronous["dataDurability"] == "required"
    owner, app = _secret_user("owner-url"), _secret_user("app-url")
    assert cluster["bootstrap"]["initdb"]["owner"] == owner
    assert [r["name"] for r in cluster["managed"]["roles"]] == [app]
    assert not cluster["enableSuperuserAccess"]


# --------------------------------------------------------------------------- rendered


def _is_custom(doc: dict[str, Any]) -> bool:
    """A custom resource (KEDA's, the Prometheus Operator's): no built-in schema. Those
    with a vendored CRD schema are validated against it; the TriggerAuthentication's
    shape is checked by its own test."""
    return str(doc["apiVersion"]).split("/")[0] in CUSTOM_GROUPS


def _render(path: Path) -> list[dict[str, Any]]:
    if KUBECTL is None:
        pytest.skip("kubectl not found: it renders the kustomizations (kubectl kustomize)")
    done = subprocess.run(
        [KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.mark.parametrize("path", [K8S, *OVERLAYS], ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_kustomization_renders_valid_resources_with_the_slots_stated_once(
    path: Path,
) -> None:
    """``kubectl kustomize`` of the base and of each overlay: every resource validates
    (built-in kinds against the newest Kubernetes schemas, custom ones against their
    CRDs), KEDA divides by the Deployment's STINT_SLOTS, and the drain budget fits
    the kubelet's grace and covers the turn timeout when one is set."""
    rendered = {f"{d['kind']}/{d['metadata']['name']}": d for d in _render(path)}
    for name, doc in rendered.items():
        key = (doc["apiVersion"], doc["kind"])
        if key in CRD_SCHEMAS:
            validator = jsonschema.Draft7Validator(
                _strict(json.loads(CRD_SCHEMAS[key].read_text()))
            )
            assert not list(validator.iter_errors(doc)), name
        elif not _is_custom(doc):
            kubernetes_validate.validate(doc, KUBE_VERSIONS[-1], strict=True)
    pod = rendered["Deployment/stint-worker"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    [trigger] = rendered["ScaledObject/stint-worker"]["spec"]["triggers"]
    assert trigger["metadata"]["targetQueryValue"] == env["STINT_SLOTS"]
    drain = float(env["STINT_DRAIN_SECONDS"])
    assert pod["terminationGracePeriodSeconds"] >= drain + 10
    if "STINT_TURN_TIMEOUT" in env:
        assert drain >= float(env["STINT_TURN_TIMEOUT"]), "turns would be replayed on rollout"
    assert all(":" in c["image"] and not c["image"].endswith(":latest") for c in pod["containers"])
    assert any(name.startswith("Job/stint-migrate") for name in rendered)
