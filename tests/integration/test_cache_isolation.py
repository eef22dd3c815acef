"""Cache isolation on the real control plane: what the operator renders for two namespaces, run for real.

The operator runs in-process against the real API server; kwok stands in for the node, so each preload Job's
container (its args and environment, downward-API fields resolved as the kubelet would) is then run here as a real
`warmstart preload` process against moto's S3 server with IAM checks on, into one directory standing for the node's
NVMe. So the test covers both halves: the keys and Jobs the operator makes per namespace, and what the preloader
does with them.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import boto3
import pytest
from kubernetes import client

import endpointing as ep
import kube
import operating
from preloadservers import CREDENTIALS, MotoServer
from warmstart.api import preloading
from warmstart.render import jobs, labels

PRELOAD_ENV_SECRET = "warmstart-preload-env"

pytestmark = pytest.mark.cluster

BUCKET = "private-models"
S3_SOURCE = {"modelSourceType": "s3", "s3Storage": {"bucketName": BUCKET, "region": "us-east-1"}, "modelLocation": "m"}
PVC_SOURCE = {"modelSourceType": "kubernetesVolume", "kubernetesVolume": {"claimName": "weights"}, "modelLocation": "m"}
FAST = {"sim.warmstart.io/duration": "1s"}


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


class IamMoto(NamedTuple):
    server: MotoServer
    reader: dict[str, str]
    stranger: dict[str, str]


def _keys(made: dict[str, str]) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": made["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": made["SecretAccessKey"]}


@pytest.fixture(scope="module")
def iam_moto() -> Iterator[IamMoto]:
    """moto with IAM on; returns the server and the credentials of `reader`, who may list and read the bucket.
    `stranger` (see the `stranger` fixture) has real credentials whose policy denies the bucket."""
    server = MotoServer(env=CREDENTIALS).start()
    admin = dict(
        endpoint_url=server.url, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    s3, iam = boto3.client("s3", **admin), boto3.client("iam", **admin)
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key="m/model.bin", Body=b"team-a's private weights")
    iam.create_user(UserName="reader")
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:*"], "Resource": "*"}]}
    iam.put_user_policy(UserName="reader", PolicyName="p", PolicyDocument=json.dumps(policy))
    made = iam.create_access_key(UserName="reader")["AccessKey"]
    iam.create_user(UserName="stranger")  # may use S3, but the private bucket is denied to it
    denied = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": ["s3:*"], "Resource": "*"},
            {"Effect": "Deny", "Action": ["s3:*"], "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]},
        ],
    }
    iam.put_user_policy(UserName="stranger", PolicyName="p", PolicyDocument=json.dumps(denied))
    strange = iam.create_access_key(UserName="stranger")["AccessKey"]
    server.set_auth(0)
    yield IamMoto(server, _keys(made), _keys(strange))
    server.stop()


@pytest.fixture
def stranger(iam_moto: IamMoto) -> dict[str, str]:
    """Real credentials (IAM user `stranger`) that the server authenticates and whose policy denies the bucket."""
    return iam_moto.stranger


@pytest.fixture
def second_namespace(api_client: client.ApiClient) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name, "labels": {"warmstart.io/test": "true"}}})
    try:
        yield name
    finally:
        objects = client.CustomObjectsApi(api_client)
        for item in objects.list_namespaced_custom_object(ep.GROUP, ep.VERSION, name, "modeldatacacheconfigs")["items"]:
            objects.patch_namespaced_custom_object(
                ep.GROUP,
                ep.VERSION,
                name,
                "modeldatacacheconfigs",
                item["metadata"]["name"],
                {"metadata": {"finalizers": None}},
            )
        core.delete_namespace(name, propagation_policy="Background")


def endpoint(namespace: str, instance_type: str, source: dict[str, Any]) -> dict[str, Any]:
    body = ep.endpoint_manifest("model", namespace, instance_type, maxDeployTimeInSeconds=3600)
    body["spec"]["modelSourceConfig"] = source
    body["spec"]["modelCacheConfig"] = {"weightsCache": {"enabled": True}}
    return body


def preload_job(api: client.ApiClient, namespace: str) -> Any:
    selector = f"{labels.MDCC_LABEL},{labels.ROLE_LABEL}={jobs.ROLE_PRELOAD}"
    return kube.wait_for(
        lambda: next(iter(client.BatchV1Api(api).list_namespaced_job(namespace, label_selector=selector).items), None),
        what=f"a preload Job in {namespace}",
    )


def mdcc_names(api: client.ApiClient, namespace: str) -> list[str]:
    return sorted(m["metadata"]["name"] for m in ep.caches(api, namespace, "modeldatacacheconfigs"))


def s3_endpoint_in(api: client.ApiClient, namespaces: list[str], url: str) -> dict[str, Any]:
    """As the chart does: the S3 endpoint among the admin's preload endpoints (plain values), the credentials in each
    namespace's preload Secret (the operator knows only their names)."""
    for ns in namespaces:
        secret = {"metadata": {"name": PRELOAD_ENV_SECRET}, "stringData": {"AWS_DEFAULT_REGION": "us-east-1"}}
        client.CoreV1Api(api).create_namespaced_secret(ns, secret)
    return {
        "preload_endpoints": {"AWS_ENDPOINT_URL_S3": url},
        "preload_env_names": ["AWS_DEFAULT_REGION"],
        "preload_env_secret": PRELOAD_ENV_SECRET,
    }


def container_of(api: client.ApiClient, job: Any) -> tuple[list[str], dict[str, str]]:
    """The preload container's args and environment, with downward-API fields and Secret references resolved as the
    kubelet would."""
    pod = job.spec.template.spec
    (container,) = pod.containers
    namespace = job.metadata.namespace
    fields = {
        "metadata.namespace": namespace,
        "spec.serviceAccountName": pod.service_account_name or "default",
        "metadata.uid": str(uuid.uuid4()),  # the pod this run stands for
    }
    env = {}
    for var in container.env or []:
        if var.value_from is None:
            env[var.name] = var.value
        elif var.value_from.field_ref is not None:
            env[var.name] = fields[var.value_from.field_ref.field_path]
        else:
            ref = var.value_from.secret_key_ref
            secret = client.CoreV1Api(api).read_namespaced_secret(ref.name, namespace)
            env[var.name] = base64.b64decode(secret.data[ref.key]).decode()
    return list(container.args), env


def run(
    args: list[str], env: dict[str, str], node: Path, extra_env: dict[str, str] | None = None, mount: Path | None = None
) -> tuple[int, dict[str, Any]]:
    """Run the rendered container as a real process: the node's NVMe is `node`, a mounted source is `mount`."""
    tlog = node.parent / f"tlog-{uuid.uuid4().hex[:6]}"
    swapped = {"--root": str(node), "--termination-log": str(tlog), "--mount-root": str(mount or "/nonexistent")}
    argv = [swapped.get(args[i - 1], a) if i else a for i, a in enumerate(args)]
    base = {
        "PATH": os.environ["PATH"],
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    done = subprocess.run(
        [sys.executable, "-m", "warmstart.cli", *argv],
        env={**base, **env, **(extra_env or {})},
        capture_output=True,
        timeout=120,
        check=False,
    )
    return done.returncode, json.loads(tlog.read_text())


def model(node: Path, key: str) -> Path:
    """The published files of `key` on the node."""
    return Path(preloading.model_dir(str(node), key))


def published(node: Path) -> list[str]:
    """The keys with a published copy on the node."""
    keys = node / preloading.CACHE_DIR_NAME / preloading.KEYS_DIR_NAME
    return sorted(p.name for p in keys.iterdir() if model(node, p.name).is_dir()) if keys.is_dir() else []


def test_two_namespaces_with_one_s3_source_never_share_a_cache(
    cluster: Any,
    api_client: client.ApiClient,
    namespace: str,
    second_namespace: str,
    iam_moto: IamMoto,
    stranger: dict[str, str],
    tmp_path: Path,
) -> None:
    server, reader, _ = iam_moto
    node = tmp_path / "nvme"
    node.mkdir()
    render = {"preload_pod_annotations": FAST, **s3_endpoint_in(api_client, [namespace, second_namespace], server.url)}
    with (
        ep.own_nodes(api_client, 1) as (instance_type, _),
        operating.operator(str(cluster.kubeconfig), [namespace, second_namespace], render=render),
    ):
        for ns in (namespace, second_namespace):
            kube.create_custom(api_client, endpoint(ns, instance_type, S3_SOURCE))
        job_a, job_b = preload_job(api_client, namespace), preload_job(api_client, second_namespace)
        names_a, names_b = mdcc_names(api_client, namespace), mdcc_names(api_client, second_namespace)
        assert names_a != names_b, "the same S3 source must get a key per namespace"
        assert job_a.metadata.name != job_b.metadata.name

        args_a, env_a = container_of(api_client, job_a)
        code, result = run(args_a, env_a, node, reader)  # team-a has an IAM role that may read the bucket
        assert code == 0 and result["reason"] == "Downloaded", result

        args_b, env_b = container_of(api_client, job_b)  # team-b's credentials are real, and IAM denies the bucket
        code, result = run(args_b, env_b, node, stranger)
        assert result["reason"] == "AccessDenied" and code == 77, result
        assert published(node) == [names_a[0].removeprefix("weights-")]

        # the model pods' warm path: team-b's init container finds nothing of team-a's either
        deployment = kube.wait_for(
            lambda: _deployment(api_client, second_namespace), timeout=120, what="team-b's Deployment"
        )
        init = next(c for c in deployment.spec.template.spec.init_containers if "--if-missing" in (c.args or []))
        model_mount = next(
            m for c in deployment.spec.template.spec.containers for m in c.volume_mounts or [] if m.sub_path
        )
        assert model_mount.sub_path == f"warmstart/keys/{names_b[0].removeprefix('weights-')}/model"
        fake_job = client.V1Job(
            metadata=client.V1ObjectMeta(namespace=second_namespace),
            spec=client.V1JobSpec(template=deployment.spec.template),
        )
        code, result = run(*container_of_init(api_client, fake_job, init), node, stranger)
        assert result["reason"] == "AccessDenied", result


def container_of_init(api: client.ApiClient, job: Any, init: Any) -> tuple[list[str], dict[str, str]]:
    job.spec.template.spec.containers = [init]
    return container_of(api, job)


def _deployment(api: client.ApiClient, namespace: str) -> Any:
    try:
        return client.AppsV1Api(api).read_namespaced_deployment("model", namespace)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def test_a_trust_group_shares_one_cache_but_each_pod_proves_its_own_access(
    cluster: Any,
    api_client: client.ApiClient,
    namespace: str,
    second_namespace: str,
    iam_moto: IamMoto,
    stranger: dict[str, str],
    tmp_path: Path,
) -> None:
    server, reader, _ = iam_moto
    node = tmp_path / "nvme"
    node.mkdir()
    render = {
        "preload_pod_annotations": {"sim.warmstart.io/duration": "600s"},
        **s3_endpoint_in(api_client, [namespace, second_namespace], server.url),
        "cache_sharing_groups": {"ml": [namespace, second_namespace]},
    }
    with (
        ep.own_nodes(api_client, 1) as (instance_type, _),
        operating.operator(str(cluster.kubeconfig), [namespace, second_namespace], render=render),
    ):
        for ns in (namespace, second_namespace):
            kube.create_custom(api_client, endpoint(ns, instance_type, S3_SOURCE))
        job_a, job_b = preload_job(api_client, namespace), preload_job(api_client, second_namespace)
        assert mdcc_names(api_client, namespace) == mdcc_names(api_client, second_namespace)
        code, result = run(*container_of(api_client, job_a), node, reader)
        assert result["reason"] == "Downloaded", result
        code, result = run(
            *container_of(api_client, job_b), node, stranger
        )  # same key, files present, but team-b's credentials may not read the source
        assert result["reason"] == "AccessDenied" and code == 77, result
        code, result = run(
            *container_of(api_client, job_b), node, reader
        )  # with a role that may: one check, then the cache
        assert result["reason"] == "AlreadyPresent" and "re-checked" in result["message"], result


def test_two_namespaces_with_a_pvc_of_one_name_get_distinct_caches(
    cluster: Any, api_client: client.ApiClient, namespace: str, second_namespace: str, tmp_path: Path
) -> None:
    """The poisoning attempt: team-b's PVC `weights` holds other bytes than team-a's; each gets its own."""
    node = tmp_path / "nvme"
    node.mkdir()
    volumes = {}
    for ns, body in ((namespace, b"team-a's model"), (second_namespace, b"planted by team-b")):
        (tmp_path / ns / "m").mkdir(parents=True)
        (tmp_path / ns / "m" / "model.bin").write_bytes(body)
        volumes[ns] = tmp_path / ns
    with (
        ep.own_nodes(api_client, 1) as (instance_type, _),
        operating.operator(
            str(cluster.kubeconfig), [namespace, second_namespace], render={"preload_pod_annotations": FAST}
        ),
    ):
        for ns in (namespace, second_namespace):
            kube.create_custom(api_client, endpoint(ns, instance_type, PVC_SOURCE))
        found = {}
        for ns in (namespace, second_namespace):
            job = preload_job(api_client, ns)
            code, result = run(*container_of(api_client, job), node, mount=volumes[ns])
            assert code == 0 and result["reason"] == "Downloaded", result
            found[ns] = mdcc_names(api_client, ns)[0].removeprefix("weights-")
        assert found[namespace] != found[second_namespace]
        assert (model(node, found[namespace]) / "model.bin").read_bytes() == b"team-a's model"
        assert (model(node, found[second_namespace]) / "model.bin").read_bytes() == b"planted by team-b"
