"""S3 (and S3-compatible stores): list a prefix or one object, and fetch it with parallel, resumable ranged GETs.

Each file first gets its check plan (`s3plans`: one HEAD where the listing does not say enough), which fixes its
part size and the digests of each part; `s3ranges` then fetches the parts of every file through one pool of
requests, journaling each part as it is written. Every GET carries If-Match on the listed ETag, so an object
overwritten mid-download fails instead of mixing two versions. A file whose parts add up to its S3 checksum or
ETag is not read again; the others are checked by `s3verify` once they land.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import logging
import os
import posixpath
from collections.abc import Callable, Sequence
from typing import Any

import boto3
import botocore.config
import botocore.credentials
import botocore.exceptions
import botocore.session

from warmstart.api.cachemanifests import ManifestFile
from warmstart.api.preloading import Reason
from warmstart.api.sources import ModelSourceConfig
from warmstart.preload import nofollow, partdigests, partjournal, s3checksums, sources, store, verifying
from warmstart.preload.results import PreloadError
from warmstart.preload.sources import (
    Listing,
    OnBytes,
    Options,
    RemoteFile,
    model_location,
    s3plans,
    s3processes,
    s3ranges,
    s3verify,
)

log = logging.getLogger(__name__)

#: HEADs in flight when a pod checks a cache another identity downloaded (one per cached object)
AUTHORIZE_WORKERS = 16

NOT_FOUND_CODES = {"NoSuchBucket", "NoSuchKey", "404", "NotFound"}
DENIED_CODES = {
    "AccessDenied",
    "403",
    "Forbidden",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AllAccessDisabled",
    "InvalidToken",
    "ExpiredToken",
    "AccountProblem",
}


def endpoint_url(explicit: str | None, env: dict[str, str] | Any) -> str | None:
    """s3Storage.endpointUrl, else AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else AWS's own."""
    return explicit or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None


#: how assumed-role sessions name themselves in CloudTrail
ROLE_SESSION_NAME = "warmstart-preload"


def assumed_role_session(role_arn: str, region: str | None) -> boto3.session.Session:
    """A session whose credentials come from sts:AssumeRole of `role_arn`, made with the pod's own credentials
    (IRSA, pod identity, instance profile or environment), and renewed by botocore before they expire."""
    sts = boto3.session.Session().client("sts", region_name=region)

    def assume() -> dict[str, str]:
        granted = sts.assume_role(RoleArn=role_arn, RoleSessionName=ROLE_SESSION_NAME)["Credentials"]
        return {
            "access_key": granted["AccessKeyId"],
            "secret_key": granted["SecretAccessKey"],
            "token": granted["SessionToken"],
            "expiry_time": granted["Expiration"].isoformat(),
        }

    credentials = botocore.credentials.RefreshableCredentials.create_from_metadata(
        metadata=assume(), refresh_using=assume, method="sts-assume-role"
    )
    core = botocore.session.get_session()
    core._credentials = credentials  # botocore's own way to give a session fixed (refreshable) credentials
    return boto3.session.Session(botocore_session=core, region_name=region)


def client(region: str | None, endpoint: str | None, concurrency: int, role_arn: str | None = None) -> Any:
    """An S3 client: the pod's credentials, or those of `role_arn` assumed through STS."""
    config = botocore.config.Config(
        max_pool_connections=concurrency + 4,
        retries={"max_attempts": 5, "mode": "standard"},
        connect_timeout=10,
        read_timeout=60,
        s3={"addressing_style": "path"} if endpoint else None,
        # the preloader checks what it downloads itself, part by part: no second CRC of every GET in Python
        response_checksum_validation="when_required",
        request_checksum_calculation="when_required",
    )
    session = assumed_role_session(role_arn, region) if role_arn else boto3.session.Session()
    return session.client("s3", region_name=region, endpoint_url=endpoint, config=config)


def object_reader(s3_client: Any) -> Callable[[str, str], bytes]:
    """Read one whole (small) object by bucket and key: how JumpStart resolution reads its documents."""

    def read(bucket: str, key: str) -> bytes:
        body: bytes = s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
        return body

    return read


def error(exc: BaseException, what: str) -> PreloadError:
    """A botocore failure as a PreloadError with a reason."""
    if isinstance(exc, PreloadError):
        return exc
    if isinstance(exc, botocore.exceptions.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in NOT_FOUND_CODES or status == 404:
            kind = "bucket" if code == "NoSuchBucket" else "object"
            return PreloadError(Reason.NOT_FOUND, f"{what}: {kind} not found ({code or status})")
        if code in DENIED_CODES or status in (401, 403):
            return PreloadError(
                Reason.ACCESS_DENIED,
                f"{what}: access denied ({code or status}); check the pod's IAM role and the bucket policy",
            )
        if code == "PreconditionFailed" or status == 412:
            return PreloadError(Reason.NETWORK_ERROR, f"{what}: the object changed during the download; retry")
        if status >= 500 or code in ("SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable"):
            return PreloadError(Reason.NETWORK_ERROR, f"{what}: server error {code or status}")
        return PreloadError(Reason.INVALID_SOURCE, f"{what}: {code or status}: {exc}")
    if isinstance(exc, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError):
        return PreloadError(
            Reason.ACCESS_DENIED, f"{what}: no AWS credentials found (IRSA/pod identity not configured?)"
        )
    if isinstance(exc, botocore.exceptions.FlexibleChecksumError):
        return PreloadError(Reason.CHECKSUM_MISMATCH, f"{what}: the store's checksum does not match the bytes received")
    if isinstance(exc, botocore.exceptions.BotoCoreError | ConnectionError | TimeoutError):
        return PreloadError(Reason.NETWORK_ERROR, f"{what}: {type(exc).__name__}: {exc}")
    if isinstance(exc, OSError) and store.is_enospc(exc):
        return store.disk_full(what, exc)
    return PreloadError(Reason.NETWORK_ERROR, f"{what}: {type(exc).__name__}: {exc}")


def journal_path(journals: str, file: RemoteFile) -> str:
    """Where the part journal of `file` is kept: one flat directory, names from the path's hash."""
    return os.path.join(journals, hashlib.sha256(file.path.encode()).hexdigest()[:32] + ".jsonl")


class S3Source:
    """A prefix (or one object) in a bucket."""

    def __init__(
        self,
        bucket: str,
        location: str,
        region: str | None,
        endpoint: str | None,
        options: Options,
        role_arn: str | None = None,
    ) -> None:
        self.bucket, self.location, self.region, self.endpoint, self.options = (
            bucket,
            location,
            region,
            endpoint,
            options,
        )
        self.role_arn = role_arn
        try:
            self.client = client(region, endpoint, options.concurrency, role_arn)
        except Exception as exc:
            raise error(exc, f"{self.uri()}: sts:AssumeRole {role_arn}") from exc
        self._plans: dict[str, s3plans.Plan] = {}
        self._proofs: dict[str, tuple[s3plans.Plan, bool]] = {}  # checked part by part as the file landed

    @classmethod
    def from_config(cls, config: ModelSourceConfig, options: Options) -> S3Source:
        if config.s3_storage is None:
            raise PreloadError(Reason.INVALID_SOURCE, "modelSourceType s3 requires s3Storage")
        s3 = config.s3_storage
        return cls(
            s3.bucket_name,
            model_location(config),
            s3.region,
            endpoint_url(s3.endpoint_url, options.env),
            options,
            s3.role_arn,
        )

    def uri(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key or self.location}"

    def describe(self) -> dict[str, Any]:
        return {"type": "s3", "bucket": self.bucket, "location": self.location, "region": self.region}

    def listing(self) -> Listing:
        if self.location and not self.location.endswith("/"):
            try:
                head = self.client.head_object(Bucket=self.bucket, Key=self.location, ChecksumMode="ENABLED")
            except botocore.exceptions.ClientError as exc:
                mapped = error(exc, self.uri())
                if mapped.reason != Reason.NOT_FOUND:
                    raise mapped from exc
            except Exception as exc:
                raise error(exc, self.uri()) from exc
            else:  # modelLocation names one object: the cache holds that one file
                name = store.safe_relpath(posixpath.basename(self.location))
                algorithms = tuple(a for a in s3checksums.ALGORITHMS if head.get(f"Checksum{a}"))
                file = RemoteFile(
                    name,
                    int(head["ContentLength"]),
                    self.location,
                    etag=head["ETag"].strip('"'),
                    checksum_algorithms=algorithms,
                )
                return Listing(files=(file,))
        prefix = self.location + "/" if self.location and not self.location.endswith("/") else self.location
        files: list[RemoteFile] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    key = obj["Key"]
                    if key.endswith("/"):
                        continue  # a "directory" marker
                    files.append(
                        RemoteFile(
                            store.safe_relpath(key[len(prefix) :]),
                            int(obj["Size"]),
                            key,
                            etag=obj["ETag"].strip('"'),
                            checksum_algorithms=tuple(obj.get("ChecksumAlgorithm") or ()),
                        )
                    )
        except PreloadError:
            raise
        except Exception as exc:
            raise error(exc, self.uri(prefix)) from exc
        if not files:
            raise PreloadError(
                Reason.NOT_FOUND,
                f"{self.uri(prefix)}: no objects under this prefix (empty prefix or wrong modelLocation)",
            )
        return Listing(files=tuple(files))

    def fetch(
        self,
        files: list[RemoteFile],
        part_path: Callable[[RemoteFile], str],
        on_bytes: OnBytes,
        on_done: Callable[[RemoteFile], None],
        scratch: str,
        on_kept: OnBytes | None = None,
    ) -> None:
        def on_file(file: RemoteFile, plan: s3plans.Plan, digests: list[dict[str, str]]) -> None:
            if plan.finish != s3plans.Finish.REREAD:
                self._proofs[file.ref] = (plan, plan.check(digests, file.size))
            on_done(file)

        if self.options.processes > 1 and len(files) > 1:
            factory = functools.partial(
                S3Source, self.bucket, self.location, self.region, self.endpoint, role_arn=self.role_arn
            )
            s3processes.fetch(
                factory, self.options, files, part_path, on_bytes, on_file, self.options.processes, scratch, on_kept
            )
            return
        self.fetch_parts(files, part_path, on_bytes, on_file, scratch, on_kept)

    def fetch_parts(
        self,
        files: list[RemoteFile],
        part_path: Callable[[RemoteFile], str],
        on_bytes: OnBytes,
        on_file: s3processes.OnLanded,
        scratch: str,
        on_kept: OnBytes | None = None,
    ) -> None:
        """Fetch in this process's threads; hand each landed file to `on_file` with its plan and part digests."""
        journals = os.path.join(scratch, "parts")
        nofollow.makedirs_inside(scratch, journals)
        ordered = sorted(files, key=lambda f: -f.size)  # large files first: the tail is small files in parallel
        with concurrent.futures.ThreadPoolExecutor(max(1, min(self.options.concurrency, len(ordered)))) as pool:
            plans = list(pool.map(self.plan, ordered))
        jobs = []
        for file, plan in zip(ordered, plans, strict=True):
            self._plans[file.ref] = plan
            header = partjournal.Header(file.fingerprint(), plan.part_size, plan.algorithms)
            jobs.append(
                s3ranges.Job(file, part_path(file), partjournal.PartJournal(journal_path(journals, file), header))
            )
        how = s3ranges.Fetch(
            get=self.get_range,
            concurrency=self.options.concurrency,
            piece_size=self.options.part_size,
            on_bytes=on_bytes,
            on_file=lambda file, digests: on_file(file, self._plans[file.ref], digests),
            classify=lambda e, f: error(e, self.uri(f.ref)),
            on_kept=on_kept or on_bytes,
        )
        s3ranges.fetch(jobs, how)

    def _journaled_proof(self, file: RemoteFile, path: str) -> bool:
        """Check a file kept from an interrupted run by its part journal: each part's cheap digest re-read from disk,
        then the parts' digests against the object's check. False when there is no complete journal to go by."""
        staging = path[: -len(file.path)] if path.endswith("/" + file.path) else None
        if staging is None:
            return False
        journals = os.path.join(staging, store.TMP_DIR_NAME, "source", "parts")
        if not os.path.isfile(journal_path(journals, file)):
            return False
        plan = self.plan(file)
        if plan.finish == s3plans.Finish.REREAD:
            return False
        header = partjournal.Header(file.fingerprint(), plan.part_size, plan.algorithms)
        recorded = partjournal.PartJournal(journal_path(journals, file), header).load()
        count = partjournal.part_count(file.size, plan.part_size)
        if len(recorded) != count:
            return False
        verifying.check_size(path, file.size, self.uri(file.ref))
        fd = nofollow.open_fd(path, os.O_RDONLY)
        try:
            kept = partjournal.recheck(
                fd, recorded, file.size, plan.part_size, plan.algorithms[0], partdigests.of_range
            )
        finally:
            os.close(fd)
        if len(kept) != count or not plan.check([kept[i] for i in range(count)], file.size):
            return False  # s3verify reads the whole file and says what is wrong
        log.debug("%s: verified by size, %s (its part journal)", self.uri(file.ref), plan.label)
        return True

    def plan(self, file: RemoteFile) -> s3plans.Plan:
        """How `file` is checked part by part (one HEAD where the listing does not tell enough)."""
        hint = functools.cache(lambda: self.part_size_hint(file))
        head = self.head_checksums(file) if s3plans.needs_head(file, self.options.part_size) else None
        return s3plans.choose(file, self.options.part_size, head, hint)

    def get_range(self, file: RemoteFile, offset: int, length: int) -> Any:
        """The body of `length` bytes at `offset` of `file`, pinned to the listed ETag."""
        pin = {"IfMatch": f'"{file.etag}"'} if file.etag else {}
        answer = self.client.get_object(
            Bucket=self.bucket, Key=file.ref, Range=f"bytes={offset}-{offset + length - 1}", **pin
        )
        if int(answer.get("ContentLength", -1)) != length:
            answer["Body"].close()
            raise PreloadError(
                Reason.NETWORK_ERROR,
                f"{self.uri(file.ref)}: asked for {length} bytes at {offset}, "
                f"the store sent {answer.get('ContentLength')}",
            )
        return answer["Body"]

    def authorize(self, files: Sequence[ManifestFile]) -> list[str]:
        """HEAD every cached object with this pod's credentials (s3:GetObject, what a download needs); the paths
        whose size or ETag differ from the manifest's, or that are gone."""
        if not files:
            raise PreloadError(Reason.NOT_FOUND, f"{self.uri()}: nothing to check access against")
        workers = max(1, min(self.options.concurrency, AUTHORIZE_WORKERS))
        with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="head") as pool:
            same = list(pool.map(self._still_cached, files))
        return [f.path for f, ok in zip(files, same, strict=True) if not ok]

    def _still_cached(self, file: ManifestFile) -> bool:
        prefix = self.location + "/" if self.location and not self.location.endswith("/") else self.location
        candidates = [prefix + file.path]
        if self.location and not self.location.endswith("/") and posixpath.basename(self.location) == file.path:
            candidates.insert(0, self.location)  # modelLocation may name the one object
        expected = sources.recorded(file)
        for key in candidates:
            try:
                head = self.client.head_object(Bucket=self.bucket, Key=key)
            except Exception as exc:
                found = error(exc, self.uri(key))
                if found.reason != Reason.NOT_FOUND:
                    raise found from exc
                continue
            return bool(
                int(head.get("ContentLength", -1)) == expected["size"]
                and str(head.get("ETag", "")).strip('"') == expected.get("etag")
            )
        return False

    def part_size_hint(self, file: RemoteFile) -> int | None:
        """The size of part 1 of a multipart object, as the store reports it (None if it does not)."""
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=file.ref, PartNumber=1)
            size = int(head["ContentLength"])
            return size if 0 < size < file.size else None
        except Exception:  # noqa: BLE001 - a hint only; the derivation from the ETag does without it
            return None

    def head_checksums(self, file: RemoteFile) -> dict[str, Any]:
        """HEAD with the additional checksums and the encryption (ChecksumMode=ENABLED), pinned to the listed ETag."""
        pin = {"IfMatch": f'"{file.etag}"'} if file.etag else {}
        try:
            head: dict[str, Any] = self.client.head_object(
                Bucket=self.bucket, Key=file.ref, ChecksumMode="ENABLED", **pin
            )
        except Exception as exc:
            raise error(exc, self.uri(file.ref)) from exc
        return head

    def verifier(self, file: RemoteFile) -> Callable[[str], None]:
        def verify(path: str) -> None:
            proof = self._proofs.pop(file.ref, None)
            if proof is not None:
                plan, ok = proof
                if ok:
                    verifying.check_size(path, file.size, self.uri(file.ref))
                    log.debug("%s: verified by size, %s (part by part)", self.uri(file.ref), plan.label)
                    return
                if plan.algorithm != partdigests.MD5:  # an MD5 ETag may be an SSE-KMS one: s3verify tells
                    raise PreloadError(
                        Reason.CHECKSUM_MISMATCH,
                        f"{self.uri(file.ref)}: content does not match the store's {plan.label}",
                    )
            if self._journaled_proof(file, path):
                return
            checked = s3verify.verify(
                path,
                file,
                self.uri(file.ref),
                functools.cache(lambda: self.head_checksums(file)),
                functools.cache(lambda: self.part_size_hint(file)),
            )
            log.debug("%s: verified by %s", self.uri(file.ref), checked)

        return verify
