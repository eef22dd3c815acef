"""The preload contract: the command line the operator runs `warmstart preload` with, and the outcome it reads back.

The preloader implements it and the operator renders and classifies it, so it belongs to neither: both import it
from here. Pure: no I/O (the preloader writes the termination message itself).

- Paths: where the preload container finds the node cache, a mounted source, the Hub token, its termination log.
- argv: `preload_args` and `delete_args` build the arguments of the `warmstart` command.
- Outcome: one `Reason` per ending, its exit code, and the JSON termination message (`Result`).
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import re
from enum import StrEnum

from warmstart.api.sources import ModelSourceConfig, ModelSourceType

#: The container's command; the arguments below start with the subcommand.
COMMAND = "warmstart"
SUBCOMMAND = "preload"

#: Where the preload writes its Result (the kubelet's default terminationMessagePath).
TERMINATION_LOG = "/dev/termination-log"
#: Where an fsx or kubernetesVolume source is mounted, read-only.
SOURCE_MOUNT = "/mnt/source"
#: Where the Hub token Secret is mounted; the token is the file `token` in it.
HF_TOKEN_DIR = "/var/run/secrets/warmstart/hf"
HF_TOKEN_FILE = f"{HF_TOKEN_DIR}/token"
#: The one directory under the cache root (`--root`) that warmstart writes; each key has its own tree in it,
#: `<root>/warmstart/keys/<key>/`, and its published files are `<root>/warmstart/keys/<key>/model/`.
CACHE_DIR_NAME = "warmstart"
#: under the cache directory: one tree per key (all a writer of that key ever reaches)
KEYS_DIR_NAME = "keys"
#: under a key's tree: the published files, with the manifest
MODEL_DIR_NAME = "model"
#: under a key's tree: each writer's proof result (`<pod uid>.json`), which the CSI driver reads when the pod ends
RESULTS_DIR_NAME = ".results"
#: under the cache directory, written by the CSI driver only: which namespaces proved their access to which content
READERS_DIR_NAME = "readers"
#: the pod's uid (downward API): names the writer's proof result for the driver
POD_UID_ENV = "WARMSTART_POD_UID"
POD_UID_FIELD = "metadata.uid"

#: Variables that choose where, or through what, a preload connects: mirror endpoints, proxies, CA bundles, the AWS
#: config file. Shared caches are keyed without them, so only the cluster admin sets them (Helm `preload.endpoints`,
#: rendered as plain values); the per-namespace preload Secret, which a tenant may be able to edit, never carries one.
CONNECTION_ENV = frozenset(
    {
        "HF_ENDPOINT",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT_URL_STS",
        "AWS_USE_FIPS_ENDPOINT",
        "AWS_USE_DUALSTACK_ENDPOINT",
        "AWS_CA_BUNDLE",
        "AWS_CONFIG_FILE",
        "AWS_PROFILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
    }
)

#: Sources the preload reads from a mounted volume at SOURCE_MOUNT rather than over the network.
MOUNTED_SOURCES = frozenset({ModelSourceType.FSX, ModelSourceType.KUBERNETES_VOLUME})


def cache_dir(root: str) -> str:
    """`<root>/warmstart`: the only directory of the cache root a preload container may touch."""
    return posixpath.join(root.rstrip("/") or "/", CACHE_DIR_NAME)


def key_dir(root: str, key: str) -> str:
    """`<root>/warmstart/keys/<key>`: everything of one key (published files, staging, lock); a writer through the CSI
    driver gets this tree and nothing else of the node."""
    return posixpath.join(cache_dir(root), KEYS_DIR_NAME, key)


def model_dir(root: str, key: str) -> str:
    """`<root>/warmstart/keys/<key>/model`: the published files, what a model pod reads."""
    return posixpath.join(key_dir(root, key), MODEL_DIR_NAME)


def legacy_model_dir(root: str, key: str) -> str:
    """`<root>/warmstart/weights/<key>`: where the earlier layout published a key (moved into its tree on first use)."""
    return posixpath.join(cache_dir(root), "weights", key)


def reader_mark(root: str, key: str, namespace: str) -> str:
    """`<root>/warmstart/readers/<key>/<namespace>`: written by the CSI driver once a preload of `namespace` proved on
    this node that it may read the key's files and that they are its source's; it holds the sha256 of the manifest
    that preload checked, so it counts only while the key holds that very content."""
    return posixpath.join(cache_dir(root), READERS_DIR_NAME, key, namespace)


def source_json(source: ModelSourceConfig) -> str:
    """The source as `--source-json` carries it: canonical camelCase JSON (sorted keys, no spaces)."""
    return json.dumps(source.to_api(), sort_keys=True, separators=(",", ":"))


def has_hf_token(source: ModelSourceConfig) -> bool:
    """Whether the source is a Hub model with a token Secret (mounted at HF_TOKEN_DIR)."""
    hf = source.hugging_face_model
    return source.model_source_type == ModelSourceType.HUGGINGFACE and bool(hf and hf.token_secret_ref)


def preload_args(
    source: ModelSourceConfig, key: str, root: str, expected_bytes: int | None = None, *, admit_reader: bool = False
) -> list[str]:
    """`preload --if-missing` of `source` into `<root>/warmstart/keys/<key>/model/`, reporting to TERMINATION_LOG;
    with `admit_reader`, the preload also leaves its proof result for the CSI driver, which records the pod's
    namespace as a reader of the content it proved."""
    args = [SUBCOMMAND, "--source-json", source_json(source), "--key", key, "--root", root, "--if-missing"]
    if admit_reader:
        args.append("--admit-reader")
    args += _source_access_args(source)
    if expected_bytes:
        args += ["--expected-bytes", str(expected_bytes)]
    return args


#: the files a router reads to tokenize requests as the engine does (router/tokenizing.py)
TOKENIZER_FILES = ("chat_template.jinja", "tokenizer.json", "tokenizer_config.json")
#: the cache key of a router pod's tokenizer files, in the pod's own emptyDir
TOKENIZER_KEY = "tokenizer"


def tokenizer_args(source: ModelSourceConfig, root: str) -> list[str]:
    """`preload --files` of the model's TOKENIZER_FILES into `<root>/warmstart/keys/tokenizer/model/`; it exits 0 even
    when it fails (the router then routes by request text) and reports why in its log and termination message."""
    files = ",".join(TOKENIZER_FILES)
    args = [SUBCOMMAND, "--source-json", source_json(source), "--key", TOKENIZER_KEY, "--root", root]
    return [*args, "--files", files, "--exit-zero", *_source_access_args(source)]


def tokenizer_dir(root: str) -> str:
    """Where `tokenizer_args(source, root)` leaves the files."""
    return model_dir(root, TOKENIZER_KEY)


def _source_access_args(source: ModelSourceConfig) -> list[str]:
    args = []
    if source.model_source_type in MOUNTED_SOURCES:
        args += ["--mount-root", SOURCE_MOUNT]
    if has_hf_token(source):
        args += ["--hf-token-file", HF_TOKEN_FILE]
    return [*args, "--termination-log", TERMINATION_LOG]


def delete_args(key: str, root: str) -> list[str]:
    """`preload --delete`: remove the files of `<root>/warmstart/keys/<key>/`."""
    return [SUBCOMMAND, "--delete", key, "--root", root]


class Outcome(StrEnum):
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class Reason(StrEnum):
    """One CamelCase word saying why a preload ended the way it did."""

    DOWNLOADED = "Downloaded"
    ALREADY_PRESENT = "AlreadyPresent"
    DELETED = "Deleted"
    RESOLVED = "Resolved"
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"
    DISK_FULL = "DiskFull"
    NOT_FOUND = "NotFound"
    ACCESS_DENIED = "AccessDenied"
    EULA_NOT_ACCEPTED = "EulaNotAccepted"
    CHECKSUM_MISMATCH = "ChecksumMismatch"
    INVALID_SOURCE = "InvalidSource"
    PATH_ESCAPE = "PathEscape"
    NETWORK_ERROR = "NetworkError"
    SECRET_MISSING = "SecretMissing"
    CACHE_TAMPERED = "CacheTampered"
    INTERNAL_ERROR = "InternalError"


#: Exit code of every success (Downloaded, AlreadyPresent, Deleted, Resolved).
EXIT_OK = 0
#: Exit code of every retryable failure (sysexits EX_TEMPFAIL): retry the same spec later.
EXIT_RETRYABLE = 75
#: argparse's own code for a malformed command line.
EXIT_USAGE = 2

#: Exit code of each permanent failure: retrying the same spec will fail the same way.
PERMANENT_EXIT_CODES: dict[Reason, int] = {
    Reason.INVALID_SOURCE: 64,
    Reason.CHECKSUM_MISMATCH: 65,
    Reason.NOT_FOUND: 66,
    Reason.SECRET_MISSING: 67,
    Reason.PATH_ESCAPE: 68,
    Reason.EULA_NOT_ACCEPTED: 69,
    Reason.INTERNAL_ERROR: 70,
    Reason.INSUFFICIENT_CAPACITY: 73,
    Reason.ACCESS_DENIED: 77,
}

#: Reasons worth retrying with the same spec (transient network or server trouble).
#: DiskFull: the disk filled up mid-download (another writer took the space the capacity check saw); the partial
#: download is removed, so a retry starts clean once space is back.
#: CacheTampered: something other than warmstart (a root-owned file or directory) sits at one of warmstart's own
#: names in the cache and the non-root preload cannot remove it; a retry succeeds once the node's admin removed it.
RETRYABLE_REASONS: frozenset[Reason] = frozenset({Reason.NETWORK_ERROR, Reason.DISK_FULL, Reason.CACHE_TAMPERED})

SUCCESS_REASONS: frozenset[Reason] = frozenset(
    {Reason.DOWNLOADED, Reason.ALREADY_PRESENT, Reason.DELETED, Reason.RESOLVED}
)

#: Exit code -> the reason it stands for (the retryable code maps to NetworkError).
REASON_BY_EXIT_CODE: dict[int, Reason] = {code: reason for reason, code in PERMANENT_EXIT_CODES.items()} | {
    EXIT_RETRYABLE: Reason.NETWORK_ERROR
}


_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@\"']+@")


def redact(text: str) -> str:
    """`text` with the credentials of any URL (`scheme://user:secret@host`) replaced by `***`."""
    return _URL_USERINFO.sub(r"\1***@", text)


def exit_code(reason: Reason) -> int:
    """The process exit code for a reason."""
    if reason in SUCCESS_REASONS:
        return EXIT_OK
    if reason in RETRYABLE_REASONS:
        return EXIT_RETRYABLE
    return PERMANENT_EXIT_CODES[reason]


def is_retryable(reason: str) -> bool:
    """Whether a reason (as read back from a termination message) is worth a retry."""
    return reason in {r.value for r in RETRYABLE_REASONS}


@dataclasses.dataclass(frozen=True)
class Result:
    """What a preload did; serialised as the container's termination message."""

    reason: Reason
    message: str
    bytes: int = 0
    seconds: float = 0.0
    files: int = 0
    kept: int = 0
    """Bytes an interrupted run left that this run verified and kept (whole files and part prefixes): not fetched."""
    manifest_sha256: str = ""
    """The sha256 of the manifest of the content this preload published or checked ('' when it ended without one)."""

    @property
    def outcome(self) -> Outcome:
        return Outcome.SUCCEEDED if self.reason in SUCCESS_REASONS else Outcome.FAILED

    @property
    def retryable(self) -> bool:
        return self.reason in RETRYABLE_REASONS

    @property
    def exit_code(self) -> int:
        return exit_code(self.reason)

    def to_json(self) -> str:
        """The termination message: one JSON object, small enough for the kubelet's 4 KiB limit."""
        body = {
            "outcome": self.outcome.value,
            "reason": self.reason.value,
            "message": redact(self.message)[:2000],
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "files": self.files,
            "kept": self.kept,
            "retryable": self.retryable,
        }
        if self.manifest_sha256:
            body["manifestSha256"] = self.manifest_sha256
        return json.dumps(body, separators=(",", ":"))


def parse(message: str) -> Result | None:
    """Read a termination message back; None if it is not one of ours."""
    try:
        body = json.loads(message)
        return Result(
            reason=Reason(body["reason"]),
            message=str(body.get("message", "")),
            bytes=int(body.get("bytes", 0)),
            seconds=float(body.get("seconds", 0.0)),
            files=int(body.get("files", 0)),
            kept=int(body.get("kept", 0)),
            manifest_sha256=str(body.get("manifestSha256", "")),
        )
    except (ValueError, KeyError, TypeError):
        return None
