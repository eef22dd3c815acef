"""Reader marks follow the content they proved: the driver writes them from a writer's proof, never a pod.

A namespace's mark names the manifest its own preload checked; a republish of other content clears every mark but
the republisher's; a re-check that the source refuses removes that namespace's mark; a mark naming other content
does not mount; a cleanup takes the key's marks with it. The node side runs on real files under a temporary root.
"""

from __future__ import annotations

import hashlib
import json
import pathlib

from warmstart.api import preloading
from warmstart.csi import decisions, proofs
from warmstart.render import jobs

KEY = "0123456789abcdef0123456789abcdef"
OLD, NEW = "a" * 64, "b" * 64


def proof(reason: str, sha: str = NEW) -> proofs.Proof:
    outcome = "Succeeded" if reason in ("Downloaded", "AlreadyPresent") else "Failed"
    return proofs.Proof(outcome, reason, sha if outcome == "Succeeded" else "")


def test_a_proof_of_the_current_content_marks_only_its_own_namespace() -> None:
    found = proofs.changes("team-b", proof("AlreadyPresent"), NEW, {"team-a": NEW})
    assert found == proofs.Changes({"team-b": NEW}, frozenset())


def test_a_republish_clears_every_mark_but_the_republishers_and_those_of_the_new_content() -> None:
    marks = {"team-a": OLD, "team-b": OLD, "team-d": NEW}
    found = proofs.changes("team-c", proof("Downloaded"), NEW, marks)
    assert found == proofs.Changes({"team-c": NEW}, frozenset({"team-a", "team-b"}))


def test_a_refused_recheck_removes_that_namespaces_mark_and_a_network_error_changes_nothing() -> None:
    assert proofs.changes("team-b", proof("AccessDenied"), NEW, {"team-b": NEW}).remove == {"team-b"}
    assert proofs.changes("team-b", proof("NotFound"), NEW, {"team-b": NEW}).remove == {"team-b"}
    assert proofs.changes("team-b", proof("NetworkError"), NEW, {"team-b": NEW}) == proofs.Changes({}, frozenset())
    assert proofs.changes("team-b", None, NEW, {"team-b": NEW}) == proofs.Changes({}, frozenset())


def test_a_proof_of_content_the_key_no_longer_holds_marks_nothing() -> None:
    assert proofs.changes("team-b", proof("AlreadyPresent", OLD), NEW, {}) == proofs.Changes({}, frozenset())
    assert proofs.changes("team-b", proof("AlreadyPresent", OLD), "", {}) == proofs.Changes({}, frozenset())


def test_a_result_file_of_the_wrong_shape_is_no_proof() -> None:
    assert proofs.parse_proof(b"not json") is None
    assert proofs.parse_proof(b'{"outcome": "Succeeded"}') is None
    assert proofs.parse_proof(b'{"outcome": "Succeeded", "reason": "Downloaded", "manifestSha256": "../x"}') is None
    body = succeeded("Downloaded", NEW)
    assert proofs.parse_proof(json.dumps(body).encode()) == proofs.Proof("Succeeded", "Downloaded", NEW)


def _publish(root: pathlib.Path, manifest: bytes) -> str:
    model = pathlib.Path(preloading.model_dir(str(root), KEY))
    model.mkdir(parents=True, exist_ok=True)
    (model / ".warmstart-manifest.json").write_bytes(manifest)
    return hashlib.sha256(manifest).hexdigest()


def succeeded(reason: str, sha: str) -> dict[str, str]:
    return {"outcome": "Succeeded", "reason": reason, "manifestSha256": sha}


def _writer_ends(root: pathlib.Path, volume: str, namespace: str, uid: str, result: dict[str, str] | None) -> None:
    """What the driver sees of one preload pod: its publish (recorded), its result file, its unpublish."""
    writer = decisions.WriterMount(namespace, uid, KEY, str(root), jobs.ROLE_PRELOAD)
    proofs.remember(str(root), volume, writer)
    if result is not None:
        results = pathlib.Path(preloading.key_dir(str(root), KEY)) / preloading.RESULTS_DIR_NAME
        results.mkdir(parents=True, exist_ok=True)
        (results / f"{uid}.json").write_text(json.dumps(result))
    proofs.settle((str(root),), volume)


def _proven(root: pathlib.Path, namespace: str) -> bool:
    mark = preloading.reader_mark(str(root), KEY, namespace)
    return proofs.reader_proven(str(root), mark, proofs.current_manifest(str(root), str(root), KEY))


def test_on_the_node_marks_follow_the_content_through_a_republish_and_a_refusal(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "nvme"
    first = _publish(root, b'{"files": 1}')
    _writer_ends(root, "csi-a", "team-a", "u-a", succeeded("Downloaded", first))
    _writer_ends(root, "csi-b", "team-b", "u-b", succeeded("AlreadyPresent", first))
    assert _proven(root, "team-a") and _proven(root, "team-b")
    assert not list((pathlib.Path(preloading.key_dir(str(root), KEY)) / ".results").iterdir())  # results consumed

    # team-c's re-check finds changed content at the source and publishes it: only team-c reads the new content
    second = _publish(root, b'{"files": 2}')
    _writer_ends(root, "csi-c", "team-c", "u-c", succeeded("Downloaded", second))
    assert _proven(root, "team-c")
    assert not _proven(root, "team-a") and not _proven(root, "team-b")
    assert sorted(proofs.read_marks(str(root), str(root), KEY)) == ["team-c"]

    # team-c's next re-check is refused by the source: its mark goes
    _writer_ends(root, "csi-c2", "team-c", "u-c2", {"outcome": "Failed", "reason": "AccessDenied"})
    assert not _proven(root, "team-c")

    # a pod that left no result (killed) changes nothing; the record of its mount is gone after unpublish
    _writer_ends(root, "csi-d", "team-d", "u-d", None)
    assert proofs.read_marks(str(root), str(root), KEY) == {}
    assert not (root / "warmstart" / proofs.VOLUMES_DIR_NAME / "csi-d.json").exists()


def test_a_mark_another_writer_planted_in_the_key_tree_is_never_read(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "nvme"
    sha = _publish(root, b'{"files": 1}')
    forged = pathlib.Path(preloading.key_dir(str(root), KEY)) / "readers" / KEY / "team-x"
    forged.parent.mkdir(parents=True)
    forged.write_text(sha)  # all a writer can reach is its key's tree
    assert not _proven(root, "team-x")


def test_a_cleanup_that_left_no_copy_takes_the_keys_marks_with_it(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "nvme"
    sha = _publish(root, b'{"files": 1}')
    _writer_ends(root, "csi-a", "team-a", "u-a", succeeded("Downloaded", sha))
    writer = decisions.WriterMount("team-a", "u-clean", KEY, str(root), jobs.ROLE_CLEANUP)
    proofs.remember(str(root), "csi-clean", writer)
    model = pathlib.Path(preloading.model_dir(str(root), KEY))
    (model / ".warmstart-manifest.json").unlink()
    model.rmdir()  # what `preload --delete` leaves
    proofs.settle((str(root),), "csi-clean")
    assert proofs.read_marks(str(root), str(root), KEY) == {}
    assert not pathlib.Path(preloading.reader_mark(str(root), KEY, "team-a")).parent.exists()


def test_a_mark_linked_elsewhere_is_not_followed(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "nvme"
    sha = _publish(root, b'{"files": 1}')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text(sha)
    mark = pathlib.Path(preloading.reader_mark(str(root), KEY, "team-x"))
    mark.parent.mkdir(parents=True)
    mark.symlink_to(elsewhere)
    assert not _proven(root, "team-x")
