"""Generate the CustomResourceDefinitions from the API models: `warmstart crds [--out DIR]`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from warmstart.api import (
    ALPHA_VERSION,
    CRD_OWNER,
    CRD_OWNER_LABEL,
    GROUP,
    VERSION,
    caches,
    endpoints,
    inferencepools,
    jumpstart,
)
from warmstart.api.schemas import structural


@dataclass(frozen=True)
class Kind:
    """How one kind is exposed: names, columns and subresources."""

    kind: str
    plural: str
    short_names: list[str]
    model: type[BaseModel]
    columns: list[dict[str, str]]
    scale: bool = False
    #: older versions served with the same schema (conversion None): HyperPod's v1alpha1 of the endpoint kinds
    also_served: tuple[str, ...] = ()
    categories: list[str] = field(default_factory=lambda: ["warmstart"])


AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _col(name: str, path: str, type_: str = "string", priority: int = 0) -> dict[str, Any]:
    column: dict[str, Any] = {"name": name, "type": type_, "jsonPath": path}
    if priority:
        column["priority"] = priority
    return column


PROGRESSING = '.status.conditions[?(@.type=="Progressing")]'

#: what a user watching a rollout looks at first: the state and why (the Progressing reason), replicas, and how far
#: the weights got (nodes cached / target nodes); `-o wide` adds where pods run and the Progressing message
ENDPOINT_COLUMNS = [
    _col("State", ".status.state"),
    _col("Reason", f"{PROGRESSING}.reason"),
    _col("Replicas", ".status.replicas", "integer"),
    _col("Available", ".status.availableReplicas", "integer"),
    _col("Weights", ".status.weightsCacheStatus.state"),
    _col("Cached", ".status.weightsCacheStatus.readyNodes", "integer"),
    _col("Targets", ".status.weightsCacheStatus.targetNodes", "integer"),
    _col("Image", ".status.imageCacheStatus.state"),
    _col("Warm", ".status.warmPlacement.warmPods", "integer", 1),
    _col("Cold", ".status.warmPlacement.coldPods", "integer", 1),
    _col("Message", f"{PROGRESSING}.message", priority=1),
    AGE,
]

KINDS = [
    Kind(
        endpoints.KIND,
        endpoints.PLURAL,
        ["iec"],
        endpoints.InferenceEndpointConfig,
        [_col("Model", ".spec.modelName"), *ENDPOINT_COLUMNS],
        scale=True,
        also_served=(ALPHA_VERSION,),
    ),
    Kind(
        jumpstart.KIND,
        jumpstart.PLURAL,
        ["jsm"],
        jumpstart.JumpStartModel,
        [_col("Model", ".spec.model.modelId"), *ENDPOINT_COLUMNS],
        scale=True,
        also_served=(ALPHA_VERSION,),
    ),
    Kind(
        caches.MDCC_KIND,
        caches.MDCC_PLURAL,
        ["mdcc"],
        caches.ModelDataCacheConfig,
        [
            _col("State", ".status.state"),
            _col("Ready", ".status.readyNodes", "integer"),
            _col("Target", ".status.targetNodes", "integer"),
            _col("Source", ".spec.modelSourceConfig.modelSourceType", priority=1),
            _col("Message", ".status.message", priority=1),
            AGE,
        ],
    ),
    Kind(
        caches.MIC_KIND,
        caches.MIC_PLURAL,
        ["mic"],
        caches.ModelImageCache,
        [
            _col("Image", ".spec.image"),
            _col("State", ".status.state"),
            _col("Ready", ".status.readyNodes", "integer"),
            _col("Target", ".status.targetNodes", "integer"),
            _col("Message", ".status.message", priority=1),
            AGE,
        ],
    ),
]


def crd(kind: Kind) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind."""
    schema = structural(kind.model)
    schema["properties"] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        **schema["properties"],
    }
    schema.pop("description", None)
    schema["description"] = (kind.model.__doc__ or "").strip()
    subresources: dict[str, Any] = {"status": {}}
    if kind.scale:
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    versions = [
        {
            "name": name,
            "served": True,
            "storage": name == VERSION,
            "schema": {"openAPIV3Schema": schema},
            "subresources": subresources,
            "additionalPrinterColumns": kind.columns,
        }
        for name in (VERSION, *kind.also_served)
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.plural}.{GROUP}", "labels": {CRD_OWNER_LABEL: CRD_OWNER}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.kind.lower(),
                "shortNames": kind.short_names,
                "categories": kind.categories,
            },
            "scope": "Namespaced",
            # no `conversion`: strategy None. v1alpha1 and v1 share one schema, so the API server only rewrites
            # apiVersion (docs/api-versions.md)
            "versions": versions,
        },
    }


class _NoAliasDumper(yaml.SafeDumper):
    """A dumper that writes repeated sub-schemas out in full: kubectl users read these files."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def rendered() -> dict[str, str]:
    """File name -> YAML text for every CRD."""
    return {
        f"{GROUP}_{kind.plural}.yaml": yaml.dump(crd(kind), Dumper=_NoAliasDumper, sort_keys=False, width=120)
        for kind in KINDS
    }


def write(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in rendered().items():
        path = out / name
        path.write_text(text)
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="warmstart crds", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("crds"), help="directory to write (default: crds)")
    parser.add_argument("--stdout", action="store_true", help="print a multi-document YAML stream instead")
    parser.add_argument(
        "--inference-pool", action="store_true", help="print the Gateway API Inference Extension's InferencePool CRD"
    )
    args = parser.parse_args(argv)
    if args.inference_pool:
        print(yaml.dump(inferencepools.crd(), Dumper=_NoAliasDumper, sort_keys=False, width=120), end="")
        return 0
    if args.stdout:
        print("---\n".join(rendered().values()), end="")
        return 0
    for path in write(args.out):
        print(f"wrote {path}")
    return 0
