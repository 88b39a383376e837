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
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from psycopg import sql

from stint.loadtest.container import CONTAINER_IMAGE
from stint.postgres.scratch import ScratchTarget
from stint.store.pool import Pool
from tests.deploy import engine
from tests.workers import fetch

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
KEDA_SCHEMA = Path(__file__).parent / "schemas" / "keda-scaledobject-v1alpha1.json"
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
        "ScaledObject/stint-worker",
    }


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_kubernetes_kinds_validate_against_the_api_schemas(version: str) -> None:
    for name, doc in MANIFESTS.items():
        if doc["apiVersion"].startswith("keda.sh/"):
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

    assert container["args"] == ["--slots", env["STINT_SLOTS"]]
    assert "STINT_WORKER_ID" not in {e["name"] for e in container["env"]}  # see the manifest


def test_the_pods_run_as_the_images_non_root_user() -> None:
    uid = re.search(r"^ARG STINT_UID=(\d+)$", (DEPLOY / "Dockerfile").read_text(), re.M)
    assert uid is not None
    for name in ("Deployment/stint-worker", "Job/stint-migrate"):
        pod = MANIFESTS[name]["spec"]["template"]["spec"]
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
        for c in matrix["sizing"]["configurations"]
        if c["slots_per_worker"] == int(env["STINT_SLOTS"])
    ]
    mib = {"Mi": 1, "Gi": 1024}
    request, limit = (container["resources"][kind]["memory"] for kind in ("requests", "limits"))
    request_mib = int(request[:-2]) * mib[request[-2:]]
    limit_mib = int(limit[:-2]) * mib[limit[-2:]]
    assert measured["peak_rss_mib_per_worker"] <= request_mib <= limit_mib
    assert "cpu" not in container["resources"]["limits"]


def test_the_references_between_manifests_resolve() -> None:
    deployment, container, _ = _worker()
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    pdb = MANIFESTS["PodDisruptionBudget/stint-worker"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert "minAvailable" not in pdb["spec"]  # it would block drains at zero replicas

    secret = MANIFESTS["Secret/stint-database"]
    refs = [
        e["valueFrom"]["secretKeyRef"]
        for doc in (deployment, MANIFESTS["Job/stint-migrate"])
        for c in doc["spec"]["template"]["spec"]["containers"]
        for e in c["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    ]
    assert refs and all(
        r["name"] == secret["metadata"]["name"] and r["key"] in secret["stringData"] for r in refs
    )
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    claim = volumes["workspace"]["persistentVolumeClaim"]["claimName"]
    assert f"PersistentVolumeClaim/{claim}" in MANIFESTS
    assert volumes["database-url"]["secret"]["secretName"] == secret["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["workspace"] == "/var/lib/stint/workspace"  # the image's STINT_WORKSPACE

    job = MANIFESTS["Job/stint-migrate"]["spec"]["template"]["spec"]["containers"][0]
    assert job["command"] == ["/opt/stint/bin/stint", "migrate"]


def test_keda_scales_the_worker_deployment_on_demand_per_slot() -> None:
    deployment, container, env = _worker()
    scaled = MANIFESTS["ScaledObject/stint-worker"]["spec"]
    assert scaled["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert scaled["minReplicaCount"] == 0  # parked sessions hold no pod
    [trigger] = scaled["triggers"]
    assert trigger["type"] == "postgresql"
    meta = trigger["metadata"]
    assert meta["targetQueryValue"] == env["STINT_SLOTS"]  # pods = demand / slots
    assert meta["connectionFromEnv"] in {e["name"] for e in container["env"]}
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
    assert env["STINT_DATABASE_URL"] == migrate["environment"]["STINT_DATABASE_URL"]

    api = services["api"]
    assert api["image"] == engine.WORKER_IMAGE
    assert [*api["entrypoint"], *api["command"]] == ["/opt/stint/bin/stint", "api"]
    assert api["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
    assert api["environment"]["STINT_DATABASE_URL"] == env["STINT_DATABASE_URL"]
