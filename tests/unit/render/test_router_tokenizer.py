"""With `kvEvents`, router pods fetch the model's tokenizer files themselves: an init container running the
operator's preload with `--files` into an emptyDir, which the router reads and its ConfigMap names (`tokenizerDir`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from warmstart.api import preloading
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.render import endpoints, passthrough, router, security
from warmstart.render.context import RenderContext
from warmstart.render.endpoints import Endpoint, ObjectRef

ROOT = Path(__file__).resolve().parents[3]
REF = ObjectRef(kind="InferenceEndpointConfig", name="example-model", namespace="team-a", uid="1111-2222")
CONTEXT = RenderContext(operator_image="warmstart:test")
DIR = "/var/run/warmstart-tokenizer/warmstart/keys/tokenizer/model"


def _endpoint(routing: dict[str, Any], source: dict[str, Any] | None = None) -> Endpoint:
    doc = yaml.safe_load((ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml").read_text())["spec"]
    doc["intelligentRoutingSpec"] = routing
    if source is not None:
        doc["modelSourceConfig"] = source
    return endpoints.from_iec(REF, InferenceEndpointConfigSpec.model_validate(doc))


def _pod(endpoint: Endpoint) -> dict[str, Any]:
    return router.deployment(endpoint, CONTEXT)["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def _config(endpoint: Endpoint) -> dict[str, Any]:
    return yaml.safe_load(router.configmap(endpoint)["data"]["router.yaml"])  # type: ignore[no-any-return]


def test_kv_events_give_router_pods_the_models_tokenizer_files() -> None:
    endpoint = _endpoint({"enabled": True, "routerConfig": {"kvEvents": True}})
    pod = _pod(endpoint)
    (fetch,) = pod["initContainers"]
    assert fetch["name"] == router.TOKENIZER_CONTAINER and fetch["image"] == CONTEXT.operator_image
    args = fetch["args"]
    assert args[0] == "preload" and args[args.index("--files") + 1] == ",".join(preloading.TOKENIZER_FILES)
    assert "--exit-zero" in args and "--if-missing" not in args
    assert preloading.source_json(endpoint.source) == args[args.index("--source-json") + 1]
    # non-root, read-only root filesystem, nothing beyond Pod Security restricted
    assert fetch["securityContext"] == security.CACHE_WRITER
    assert passthrough.init_container_breaches(fetch) == []
    # its emptyDir, read-only to the router, which the ConfigMap names
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[router.TOKENIZER_VOLUME] == {"name": router.TOKENIZER_VOLUME, "emptyDir": {}}
    assert not any("hostPath" in v or "csi" in v for v in pod["volumes"])
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] != router.SYNC_VOLUME]
    assert mount == {
        "name": router.TOKENIZER_VOLUME,
        "mountPath": "/var/run/warmstart-tokenizer/warmstart",
        "readOnly": True,
    }
    assert _config(endpoint)["tokenizerDir"] == DIR == preloading.tokenizer_dir(router.TOKENIZER_ROOT)
    # the router container itself gets no credentials
    assert [e["name"] for e in pod["containers"][0]["env"]] == ["POD_IP"]  # its own address, for the peer sync


def test_a_hub_token_is_mounted_into_the_fetch_only() -> None:
    hub = {
        "modelSourceType": "huggingface",
        "huggingFaceModel": {
            "modelId": "org/model",
            "tokenSecretRef": {"name": "hf", "key": "token"},
        },
    }
    pod = _pod(_endpoint({"enabled": True, "routerConfig": {"kvEvents": True}}, hub))
    (fetch,) = pod["initContainers"]
    assert "--hf-token-file" in fetch["args"]
    secret_volumes = {v["name"] for v in pod["volumes"] if "secret" in v} - {router.SYNC_VOLUME}
    assert secret_volumes and secret_volumes <= {m["name"] for m in fetch["volumeMounts"]}
    assert not secret_volumes & {m["name"] for m in pod["containers"][0]["volumeMounts"]}


def test_without_kv_events_router_pods_fetch_nothing() -> None:
    for routing in ({"enabled": True}, {"enabled": True, "routerConfig": {"kvEvents": False}}):
        endpoint = _endpoint(routing)
        pod = _pod(endpoint)
        assert "initContainers" not in pod
        assert [v["name"] for v in pod["volumes"]] == [router.SYNC_VOLUME]  # the sync key alone
        assert [m["name"] for m in pod["containers"][0]["volumeMounts"]] == [router.SYNC_VOLUME]
        assert "tokenizerDir" not in _config(endpoint)
