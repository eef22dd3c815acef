"""Reader marks: the CSI driver's record of which namespace proved its access to which content of a key on this node.

A namespace reads a shared key only where its own preload Job proved, with the namespace's credentials, that it may
read every file of the source and that the cached files are the source's. The pod never records that itself: a writer
reaches only its key's tree, and leaves its proof result there (`keys/<key>/.results/<pod uid>.json`, written by
`warmstart preload --admit-reader`). When the pod's volume is unpublished, the driver reads that result for the
namespace and pod it mounted (its own record of the mount, out of every pod's reach) and writes or removes the mark
`<root>/warmstart/readers/<key>/<namespace>`, which holds the sha256 of the manifest the preload proved:

- Succeeded, for the content the key holds now: the namespace's mark names that content.
- Downloaded (new content published): every mark naming other content goes; those namespaces prove again.
- AccessDenied or NotFound (the source refused this namespace): the namespace's mark goes.
- Anything else (a network error, a kill, no result): nothing changes.
- A cleanup that left no published copy: the key's marks go (its tree stays, with only its lock: a writer of the key
  may be starting).

A read mounts only while the namespace's mark names the key's current manifest, so a mark never outlives the content
it proved. `changes` is the pure rule; the rest reads and writes the node.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import posixpath
import re
import shutil
from collections.abc import Iterator, Mapping

from warmstart.api import preloading
from warmstart.csi import decisions, mounting
from warmstart.render import jobs

logger = logging.getLogger(__name__)

#: where the driver records its write mounts: `<root>/warmstart/volumes/<volume id>.json` (no pod mounts it)
VOLUMES_DIR_NAME = "volumes"
MANIFEST_NAME = ".warmstart-manifest.json"
#: the most of a writer's result file the driver reads
RESULT_LIMIT = 4096
_VOLUME_ID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
#: results that say the source refused the namespace: its mark goes
REFUSALS = frozenset({preloading.Reason.ACCESS_DENIED.value, preloading.Reason.NOT_FOUND.value})


@dataclasses.dataclass(frozen=True)
class Proof:
    """A writer's result as it left it: outcome, reason and the manifest it published or checked."""

    outcome: str
    reason: str
    manifest_sha256: str


@dataclasses.dataclass(frozen=True)
class Changes:
    """Marks to write (namespace -> manifest sha256) and namespaces whose mark goes."""

    write: dict[str, str]
    remove: frozenset[str]


def changes(namespace: str, proof: Proof | None, current: str, marks: Mapping[str, str]) -> Changes:
    """What one writer's proof does to the key's marks, given the key's current manifest sha256 ('' when none)."""
    if proof is None:
        return Changes({}, frozenset())
    if proof.outcome == preloading.Outcome.FAILED.value:
        return Changes({}, frozenset({namespace}) if proof.reason in REFUSALS else frozenset())
    if not current or proof.manifest_sha256 != current:
        return Changes({}, frozenset())  # it proved content the key no longer holds
    stale = frozenset(ns for ns, sha in marks.items() if sha != current and ns != namespace)
    if proof.reason == preloading.Reason.DOWNLOADED.value:
        return Changes({namespace: current}, stale)
    return Changes({namespace: current}, frozenset())


def parse_proof(data: bytes) -> Proof | None:
    """A result file's content, or None when it is not one."""
    try:
        body = json.loads(data)
        proof = Proof(str(body["outcome"]), str(body["reason"]), str(body.get("manifestSha256", "")))
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    if proof.manifest_sha256 and not _SHA256.match(proof.manifest_sha256):
        return None
    return proof


# --- the node side -------------------------------------------------------------------------------------------------


def _read_file(root: str, directory: str, name: str, limit: int | None = None) -> bytes | None:
    """`directory/name`, reached from `root` without following any link; None when it is not there or not a file."""
    try:
        fd = mounting.open_plain(root, directory)
    except mounting.PathError:
        return None
    try:
        found = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    with os.fdopen(found, "rb") as file:
        if not os.path.isfile(f"/proc/self/fd/{found}"):
            return None
        return file.read(limit) if limit is not None else file.read()


def current_manifest(root: str, host_path: str, key: str) -> str:
    """The sha256 of the key's published manifest on this node, '' when it has none."""
    data = _read_file(root, preloading.model_dir(host_path, key), MANIFEST_NAME)
    return hashlib.sha256(data).hexdigest() if data is not None else ""


def reader_proven(root: str, mark: str, current: str) -> bool:
    """Whether the namespace's mark names the key's current content."""
    data = _read_file(root, posixpath.dirname(mark), posixpath.basename(mark), 128)
    return bool(current) and data is not None and data.decode("ascii", "replace").strip() == current


def _marks_dir(host_path: str, key: str) -> str:
    return posixpath.dirname(preloading.reader_mark(host_path, key, "x"))


def read_marks(root: str, host_path: str, key: str) -> dict[str, str]:
    """Every namespace's mark of the key on this node: namespace -> the manifest sha256 it names."""
    directory = _marks_dir(host_path, key)
    try:
        mounting.plain_directory(root, directory)
        names = [n for n in os.listdir(directory) if not n.startswith(".")]
    except (mounting.PathError, OSError):
        return {}
    found = {}
    for name in names:
        data = _read_file(root, directory, name, 128)
        found[name] = data.decode("ascii", "replace").strip() if data is not None else ""
    return found


def apply(root: str, host_path: str, key: str, found: Changes) -> None:
    """Write and remove marks (the driver is their only writer; links on the way are refused, never followed)."""
    directory = _marks_dir(host_path, key)
    for namespace in found.remove:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError, mounting.PathError):
            mounting.plain_directory(root, directory)
            os.unlink(posixpath.join(directory, namespace))
    for namespace, sha in found.write.items():
        mounting.make_plain_dirs(root, directory)
        tmp = posixpath.join(directory, f".{namespace}.tmp")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="ascii") as file:
            file.write(sha)
        target = posixpath.join(directory, namespace)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)  # a mark of the earlier layout (a directory): it named no content
        os.replace(tmp, target)


def _record_path(root: str, volume_id: str) -> str:
    return posixpath.join(preloading.cache_dir(root), VOLUMES_DIR_NAME, f"{volume_id}.json")


def remember(root: str, volume_id: str, writer: decisions.WriterMount) -> None:
    """Record a write mount, so its proof can be read when the kubelet unpublishes it (only the volume id comes)."""
    if not _VOLUME_ID.match(volume_id):
        logger.warning("volume id %r is not a file name; its writer's proof will not be read", volume_id)
        return
    path = _record_path(root, volume_id)
    mounting.make_plain_dirs(root, posixpath.dirname(path))
    tmp = f"{path}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        json.dump(dataclasses.asdict(writer), file)
    os.replace(tmp, path)


@contextlib.contextmanager
def _recorded(roots: tuple[str, ...], volume_id: str) -> Iterator[tuple[str, decisions.WriterMount] | None]:
    """The write mount recorded for `volume_id` and its root (None if none); the record goes once handled."""
    if not _VOLUME_ID.match(volume_id):
        yield None
        return
    for root in roots:
        data = _read_file(root, posixpath.dirname(_record_path(root, volume_id)), f"{volume_id}.json", RESULT_LIMIT)
        if data is None:
            continue
        try:
            writer = decisions.WriterMount(**json.loads(data))
        except (ValueError, TypeError):
            logger.warning("ignoring the unreadable record of volume %s", volume_id)
            writer = None
        yield (root, writer) if writer is not None else None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_record_path(root, volume_id))
        return
    yield None


def settle(roots: tuple[str, ...], volume_id: str) -> None:
    """After a write volume is unpublished: turn its writer's proof into the namespace's mark (see the module doc)."""
    with _recorded(roots, volume_id) as found:
        if found is None:
            return
        root, writer = found
        key_dir = preloading.key_dir(writer.host_path, writer.key)
        if writer.role == jobs.ROLE_CLEANUP:
            _forget_key(root, writer, key_dir)
            return
        results = posixpath.join(key_dir, preloading.RESULTS_DIR_NAME)
        data = _read_file(root, results, f"{writer.pod_uid}.json", RESULT_LIMIT)
        proof = parse_proof(data) if data is not None else None
        current = current_manifest(root, writer.host_path, writer.key)
        found_changes = changes(writer.namespace, proof, current, read_marks(root, writer.host_path, writer.key))
        apply(root, writer.host_path, writer.key, found_changes)
        with contextlib.suppress(OSError, mounting.PathError):
            mounting.plain_directory(root, results)
            os.unlink(posixpath.join(results, f"{writer.pod_uid}.json"))
        logger.info(
            "writer %s/%s of %s: %s; marks written %s, removed %s",
            writer.namespace,
            writer.pod_uid,
            writer.key,
            proof.reason if proof else "no result",
            sorted(found_changes.write),
            sorted(found_changes.remove),
        )


def _forget_key(root: str, writer: decisions.WriterMount, key_dir: str) -> None:
    """A cleanup ended: when no copy is published or staged, the key's marks go (a refill is proven again)."""
    model = preloading.model_dir(writer.host_path, writer.key)
    staging = posixpath.join(key_dir, ".staging")
    if os.path.lexists(model) or os.path.lexists(staging):
        return
    marks = _marks_dir(writer.host_path, writer.key)
    try:
        mounting.plain_directory(root, marks)
    except mounting.PathError:
        return
    shutil.rmtree(marks, ignore_errors=True)  # never follows links: they are unlinked
    logger.info("cache %s removed from this node: its reader marks went with it", writer.key)
