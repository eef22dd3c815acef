"""The CSI Identity and Node services and the kubelet's plugin Registration service, over gRPC (grpcio).

Only what an inline ephemeral, node-local volume needs: no Controller service, no staging. NodePublishVolume asks
`decisions` who may mount what, and answers:

- OK after a bind mount;
- PERMISSION_DENIED with the reason (the kubelet reports it in a FailedMount Event and keeps the pod waiting);
- UNAVAILABLE when the cache is not on this node yet, the operator has not signed its Job yet, or the API server did
  not answer: the kubelet retries with back-off, so a model pod on a cold node starts once the node's preload ends.

The driver registers itself with the kubelet (a socket in the kubelet's `plugins_registry`), as the
node-driver-registrar sidecar would: one process, one container.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
import urllib3
from kubernetes.client.exceptions import ApiException

from warmstart.api import preloading
from warmstart.csi import decisions, lookups, mounting, proofs
from warmstart.csi.protos import csi_pb2, csi_pb2_grpc, pluginregistration_pb2, pluginregistration_pb2_grpc
from warmstart.render import cache_volumes, security

logger = logging.getLogger(__name__)

DRIVER_NAME = cache_volumes.DRIVER
VENDOR_VERSION = "0.1.0"
#: CSI versions the driver speaks (the kubelet's plugin registration asks for this list)
CSI_VERSIONS = ("1.0.0",)


@dataclasses.dataclass(frozen=True)
class Settings:
    """The driver's node and the admin's configuration (chart values)."""

    node: str
    allowed_roots: tuple[str, ...]
    groups: Mapping[str, Sequence[str]]
    signing_key: bytes
    csi_endpoint: str
    """The CSI socket's path as the kubelet sees it (GetInfo returns it)."""


class Identity(csi_pb2_grpc.IdentityServicer):
    def GetPluginInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        return csi_pb2.GetPluginInfoResponse(name=DRIVER_NAME, vendor_version=VENDOR_VERSION)

    def GetPluginCapabilities(self, request: Any, context: grpc.ServicerContext) -> Any:
        return csi_pb2.GetPluginCapabilitiesResponse()

    def Probe(self, request: Any, context: grpc.ServicerContext) -> Any:
        return csi_pb2.ProbeResponse()


class Node(csi_pb2_grpc.NodeServicer):
    def __init__(self, settings: Settings, reads: lookups.Lookups) -> None:
        self._settings = settings
        self._reads = reads

    def NodeGetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        return csi_pb2.NodeGetInfoResponse(node_id=self._settings.node)

    def NodeGetCapabilities(self, request: Any, context: grpc.ServicerContext) -> Any:
        return csi_pb2.NodeGetCapabilitiesResponse()

    def NodePublishVolume(self, request: Any, context: grpc.ServicerContext) -> Any:
        target = request.target_path
        if not target:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "target_path is required")
        try:
            decision = self.decide(dict(request.volume_context), request.readonly)
        except ApiException as error:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"the API server refused a read: {error.status} {error.reason}")
        except urllib3.exceptions.HTTPError as error:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"the API server did not answer: {type(error).__name__}")
        logger.info("publish %s: %s %s", request.volume_id, decision.verdict.value, decision.message)
        if decision.verdict == decisions.Verdict.DENIED:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, decision.message)
        if decision.verdict == decisions.Verdict.NOT_YET:
            context.abort(grpc.StatusCode.UNAVAILABLE, decision.message)
        root = next(r for r in self._settings.allowed_roots if decision.path.startswith(r.rstrip("/") + "/"))
        try:
            if decision.writer is not None:
                writer = decision.writer
                legacy = preloading.legacy_model_dir(writer.host_path, writer.key)
                mounting.own_key_dir(root, decision.path, legacy, security.CACHE_UID)
                proofs.remember(root, request.volume_id, writer)
            checked = mounting.open_plain(root, decision.path)
        except mounting.PathError as error:
            if error.missing:
                context.abort(
                    grpc.StatusCode.UNAVAILABLE,
                    f"the cache is not on node {self._settings.node} yet ({error}); its preload fills it",
                )
            context.abort(grpc.StatusCode.PERMISSION_DENIED, f"refused: {error}")
        if decision.reader_mark:
            self._require_reader(root, decision, checked, context)
        try:  # the descriptor pins the checked directory: a link swapped in since is not followed
            mounting.bind(f"/proc/self/fd/{checked}", target, read_only=decision.read_only)
        finally:
            os.close(checked)
        return csi_pb2.NodePublishVolumeResponse()

    def _require_reader(
        self, root: str, decision: decisions.Decision, checked: int, context: grpc.ServicerContext
    ) -> None:
        """The namespace's preload proved its access to the content the key holds now on this node, or the mount
        waits (UNAVAILABLE)."""
        current = proofs.current_manifest(root, decision.host_path, decision.key)
        if not proofs.reader_proven(root, decision.reader_mark, current):
            os.close(checked)
            namespace = os.path.basename(decision.reader_mark)
            logger.info("waiting: namespace %s has no proof of the current content of %s", namespace, decision.key)
            context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"namespace {namespace} has not proven its access to this cache's current content on node"
                f" {self._settings.node}; its own preload Job checks it against the source",
            )

    def decide(self, volume_context: dict[str, str], read_only: bool) -> decisions.Decision:
        volume = decisions.parse_volume(volume_context, read_only)
        if isinstance(volume, decisions.Decision):
            return volume
        settings = self._settings
        caches = decisions.caches_of(volume.namespace, self._reads.caches(volume.namespace), settings.groups)
        if volume.access == decisions.READ:
            return decisions.decide_read(volume, caches, settings.allowed_roots)
        writer = self._reads.writer(volume.namespace, volume.pod_name)
        return decisions.decide_write(
            volume, caches, settings.allowed_roots, settings.node, writer, settings.signing_key
        )

    def NodeUnpublishVolume(self, request: Any, context: grpc.ServicerContext) -> Any:
        if not request.target_path:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "target_path is required")
        mounting.unbind(request.target_path)
        try:
            proofs.settle(self._settings.allowed_roots, request.volume_id)
        except OSError:  # the mount is gone either way; the namespace proves again on its next preload
            logger.exception("reading the proof of volume %s failed", request.volume_id)
        return csi_pb2.NodeUnpublishVolumeResponse()


class Registration(pluginregistration_pb2_grpc.RegistrationServicer):
    """The kubelet's plugin watcher asks who we are, then tells whether it registered us."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pluginregistration_pb2.PluginInfo(
            type="CSIPlugin",
            name=DRIVER_NAME,
            endpoint=self._settings.csi_endpoint,
            supported_versions=list(CSI_VERSIONS),
        )

    def NotifyRegistrationStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.plugin_registered:
            logger.info("registered with the kubelet as %s", DRIVER_NAME)
        else:
            logger.error("the kubelet refused the registration: %s", request.error)
        return pluginregistration_pb2.RegistrationStatusResponse()
