"""Only EndpointSlices the EndpointSlice controller keeps for the Service are believed: label, name and owner."""

from __future__ import annotations

from kubernetes import client

from warmstart.router import trusting


def endpoint_slice(
    name: str,
    labels: dict[str, str],
    owners: list[client.V1OwnerReference] | None = None,
) -> client.V1EndpointSlice:
    return client.V1EndpointSlice(
        address_type="IPv4",
        endpoints=[],
        metadata=client.V1ObjectMeta(name=name, labels=labels, owner_references=owners),
    )


CONTROLLER_LABELS = {trusting.SERVICE_NAME_LABEL: "model", trusting.MANAGED_BY_LABEL: trusting.CONTROLLER}


def owner(kind: str = "Service", name: str = "model", controller: bool | None = True) -> client.V1OwnerReference:
    return client.V1OwnerReference(api_version="v1", kind=kind, name=name, uid="u-1", controller=controller)


def test_the_controllers_slice_is_kept_and_every_imitation_is_ignored() -> None:
    slices = [
        endpoint_slice("model-abcde", CONTROLLER_LABELS, [owner()]),
        endpoint_slice("by-hand", {trusting.SERVICE_NAME_LABEL: "model"}),
        endpoint_slice("label-only", CONTROLLER_LABELS),
        endpoint_slice("other-manager", {**CONTROLLER_LABELS, trusting.MANAGED_BY_LABEL: "tenant"}, [owner()]),
        endpoint_slice("other-owner", CONTROLLER_LABELS, [owner(name="other")]),
        endpoint_slice("not-controller", CONTROLLER_LABELS, [owner(controller=None)]),
        endpoint_slice("owned-by-a-pod", CONTROLLER_LABELS, [owner(kind="Pod")]),
        endpoint_slice("other-service", {**CONTROLLER_LABELS, trusting.SERVICE_NAME_LABEL: "other"}, [owner()]),
    ]
    kept, ignored = trusting.split(slices, "model")
    assert [s.metadata.name for s in kept] == ["model-abcde"]
    assert ignored == sorted(s.metadata.name for s in slices[1:])
