"""`warmstart preload`: parse the command line, run one preload, delete or JumpStart resolution, report the Result.

Every outcome ends the same way: one log line, the JSON termination message (when the directory of
--termination-log exists, as /dev exists in a pod) and the exit code of its reason (see warmstart.api.preloading).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

import pydantic

from warmstart.api import cachemanifests, jumpstartspecs
from warmstart.api import preloading as contract
from warmstart.api.preloading import Reason, Result
from warmstart.api.sources import ModelSourceConfig
from warmstart.preload import preloading, results, store
from warmstart.preload.results import PreloadError
from warmstart.preload.sources import DEFAULT_CONCURRENCY, DEFAULT_PART_SIZE, Options, Source, open_source, subset

log = logging.getLogger("warmstart.preload")
LOG_FORMAT = "%(asctime)s %(levelname)s %(message)s"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="warmstart preload", description="Download model weights into the node cache.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--source-json", help="ModelSourceConfig as camelCase JSON")
    what.add_argument("--jumpstart-json", help='{"modelId":..,"modelVersion":..,"acceptEula":..}')
    what.add_argument("--delete", metavar="KEY", help="remove the cache of KEY under --root")
    p.add_argument("--key", help="cache key: ^[a-z0-9][a-z0-9-]{0,62}$")
    p.add_argument("--root", help="host path holding warmstart/keys/<key>/")
    p.add_argument("--if-missing", action="store_true", help="exit 0 at once if a complete cache of --key exists")
    p.add_argument(
        "--admit-reader",
        action="store_true",
        help="leave this pod's proof result in the key's tree for the CSI driver, "
        "with the manifest it proved; the driver then records the namespace as a reader of that content",
    )
    p.add_argument(
        "--files",
        metavar="NAMES",
        help="only these comma-separated top-level files of the model, those the source has (a tokenizer's)",
    )
    p.add_argument(
        "--exit-zero",
        action="store_true",
        help="exit 0 whatever the outcome, which the log and the termination message still report "
        "(for a fetch its pod can run without)",
    )
    p.add_argument(
        "--mount-root", default=contract.SOURCE_MOUNT, help="where the Job mounts an fsx or kubernetesVolume source"
    )
    p.add_argument(
        "--hf-token-file",
        default=None,
        help=f"file holding the Hub token (default {contract.HF_TOKEN_FILE} if present)",
    )
    p.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY, help="parallel requests or copies")
    p.add_argument(
        "--processes", type=int, default=1, help="S3: download processes sharing --concurrency (one GIL each)"
    )
    p.add_argument("--part-size-mb", type=int, default=DEFAULT_PART_SIZE >> 20, help="range size for large files, MiB")
    p.add_argument("--termination-log", default=contract.TERMINATION_LOG, help="where to write the JSON result")
    p.add_argument(
        "--expected-bytes", type=int, default=0, help="size the operator expects; the capacity check uses the larger"
    )
    p.add_argument("--region", help="AWS region (JumpStart)")
    p.add_argument("--instance-type", help="instance type, e.g. ml.g5.12xlarge (JumpStart)")
    p.add_argument("--resolve-only", action="store_true", help="JumpStart: print the resolution as JSON and exit")
    p.add_argument("--progress-interval", type=float, default=5.0, help="seconds between progress lines")
    return p


def options(args: argparse.Namespace) -> Options:
    if args.concurrency < 1 or args.part_size_mb < 1 or args.processes < 1:
        raise PreloadError(Reason.INVALID_SOURCE, "--concurrency, --processes and --part-size-mb must be at least 1")
    token_file = args.hf_token_file
    if token_file is None and os.path.exists(contract.HF_TOKEN_FILE):
        token_file = contract.HF_TOKEN_FILE
    return Options(
        concurrency=args.concurrency,
        part_size=args.part_size_mb << 20,
        mount_root=args.mount_root,
        hf_token_file=token_file,
        env=dict(os.environ),
        processes=args.processes,
    )


def source_config(args: argparse.Namespace, opts: Options) -> ModelSourceConfig:
    """The source to fetch: --source-json, or the S3 artifacts a JumpStart model resolves to."""
    if args.source_json is not None:
        try:
            return ModelSourceConfig.model_validate(json.loads(args.source_json))
        except (ValueError, pydantic.ValidationError) as exc:
            raise PreloadError(Reason.INVALID_SOURCE, f"--source-json is not a valid ModelSourceConfig: {exc}") from exc
    resolution = resolve_jumpstart(args, opts)
    if resolution.s3_data_type != "S3Prefix":
        raise PreloadError(
            Reason.INVALID_SOURCE,
            f"{resolution.s3_uri} is a packed artifact ({resolution.s3_data_type}); "
            "only uncompressed S3Prefix artifacts are cached",
        )
    from warmstart.preload.sources import s3

    return resolution.model_source(s3.endpoint_url(None, opts.env))


def resolve_jumpstart(args: argparse.Namespace, opts: Options) -> jumpstartspecs.Resolution:
    from warmstart.preload.sources import s3

    if not args.region or not args.instance_type:
        raise PreloadError(Reason.INVALID_SOURCE, "--jumpstart-json needs --region and --instance-type")
    try:
        ref = json.loads(args.jumpstart_json)
        model_id = str(ref["modelId"])
    except (ValueError, KeyError, TypeError) as exc:
        raise PreloadError(Reason.INVALID_SOURCE, f"--jumpstart-json needs at least modelId: {exc}") from exc
    content, gated = jumpstartspecs.buckets(args.region, opts.env)
    read = s3.object_reader(s3.client(args.region, s3.endpoint_url(None, opts.env), 4))
    try:
        return jumpstartspecs.resolve(
            model_id,
            ref.get("modelVersion"),
            args.region,
            args.instance_type,
            bool(ref.get("acceptEula", False)),
            read,
            content_bucket=content,
            gated_bucket=gated,
        )
    except jumpstartspecs.EulaNotAccepted as exc:
        raise PreloadError(Reason.EULA_NOT_ACCEPTED, str(exc)) from exc
    except (jumpstartspecs.ModelNotFound, jumpstartspecs.VersionNotFound) as exc:
        raise PreloadError(Reason.NOT_FOUND, str(exc)) from exc
    except jumpstartspecs.ResolutionError as exc:
        raise PreloadError(Reason.INVALID_SOURCE, str(exc)) from exc
    except Exception as exc:  # the S3 client's own errors: not found, denied, network
        raise s3.error(exc, f"JumpStart manifest or spec in s3://{content}") from exc


def run(args: argparse.Namespace) -> Result:
    started = time.monotonic()
    if not args.root:
        raise PreloadError(Reason.INVALID_SOURCE, "--root is required")
    if args.delete is not None:
        removed = store.delete(args.root, args.delete)
        what = "removed" if removed else "nothing to remove at"
        return Result(
            Reason.DELETED, f"{what} {store.layout(args.root, args.delete).final}", seconds=time.monotonic() - started
        )
    if not args.key:
        raise PreloadError(Reason.INVALID_SOURCE, "--key is required")
    lay = store.layout(args.root, args.key)
    identity = cachemanifests.identity_from_env(os.environ)
    pod_uid = os.environ.get(contract.POD_UID_ENV, "")
    if args.admit_reader and (identity is None or not pod_uid):
        raise PreloadError(
            Reason.INVALID_SOURCE,
            f"--admit-reader needs the pod's identity ({cachemanifests.NAMESPACE_ENV}, {contract.POD_UID_ENV})",
        )
    if not args.admit_reader:
        return _fill(args, lay, identity, started)
    try:
        result = _fill(args, lay, identity, started)
    except PreloadError as exc:
        store.leave_proof(lay, pod_uid, contract.Outcome.FAILED.value, exc.reason.value, "")
        raise
    store.leave_proof(lay, pod_uid, result.outcome.value, result.reason.value, result.manifest_sha256)
    return result


def _fill(
    args: argparse.Namespace, lay: store.Layout, identity: cachemanifests.Identity | None, started: float
) -> Result:
    if args.if_missing and (done := preloading.present(lay, started, identity)) is not None:
        return done  # the warm path, cache made by this identity: no source is contacted, no secret is read
    opts = options(args)
    source: Source = open_source(source_config(args, opts), opts)
    if args.files is not None:
        try:
            source = subset.Subset(source, subset.names_of(args.files))
        except ValueError as exc:
            raise PreloadError(Reason.INVALID_SOURCE, str(exc)) from exc
    return preloading.preload(
        source,
        lay,
        identity=identity,
        if_missing=args.if_missing,
        expected_bytes=args.expected_bytes,
        progress_interval=args.progress_interval,
    )


class Redacting(logging.Formatter):
    """Every log line without URL credentials (an endpointUrl may carry them)."""

    def format(self, record: logging.LogRecord) -> str:
        return contract.redact(super().format(record))


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(Redacting(LOG_FORMAT))
    for noisy in ("botocore", "boto3", "s3transfer", "urllib3", "huggingface_hub", "httpx", "httpx2", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args = parser().parse_args(argv)
    try:
        if args.jumpstart_json is not None and args.resolve_only:
            resolution = resolve_jumpstart(args, options(args))
            print(json.dumps(resolution.to_json(), indent=1))
            result = Result(Reason.RESOLVED, f"{resolution.model_id} {resolution.version} -> {resolution.s3_uri}")
        else:
            result = run(args)
    except PreloadError as exc:
        result = Result(exc.reason, exc.message)
    except KeyboardInterrupt:
        result = Result(Reason.NETWORK_ERROR, "interrupted")
    except Exception as exc:
        log.exception("unexpected failure")
        result = Result(Reason.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
    level = logging.INFO if result.outcome == contract.Outcome.SUCCEEDED else logging.ERROR
    log.log(level, "%s: %s", result.reason.value, result.message)
    results.write_termination_log(args.termination_log, result)
    return 0 if args.exit_zero else result.exit_code
