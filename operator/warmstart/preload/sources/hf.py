"""The Hugging Face Hub (or a mirror at HF_ENDPOINT): list a repo at a pinned commit and fetch with huggingface_hub.

The listing is `HfApi.list_repo_tree` at the commit (the tree API gives sizes, LFS sha256 and git blob ids);
each file is fetched by `hf_hub_download` pinned to that commit, several at a time, into a scratch
`local_dir` inside the staging directory. huggingface_hub checks only sizes, so sha256 (LFS files) and the
git blob id (small files) are verified here. Xet is disabled: plain HTTP is what mirrors and tests speak.
The token is passed to huggingface_hub and never logged. A cache another identity made is checked file by file
(`authorize`: a HEAD of each, whose ETag is the LFS sha256 or the git blob id) before this pod uses it.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_DISABLE_XET"] = "1"  # read by huggingface_hub at import time
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import concurrent.futures
import logging
from collections.abc import Callable, Sequence
from typing import Any

import httpx2
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub import errors as hf_errors
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import filter_repo_objects  # type: ignore[attr-defined]

from warmstart.api.cachemanifests import ManifestFile
from warmstart.api.preloading import Reason
from warmstart.api.sources import HuggingFaceModel, ModelSourceConfig
from warmstart.preload import sources, store, verifying
from warmstart.preload.results import PreloadError
from warmstart.preload.sources import Listing, OnBytes, Options, RemoteFile

log = logging.getLogger(__name__)

#: hf_hub_download fetches a file in one stream, so parallelism is across files only.
MAX_PARALLEL_FILES = 8


def read_token(model: HuggingFaceModel, options: Options) -> str | None:
    """The Hub token: the mounted secret file, else HF_TOKEN; SecretMissing if the spec names a secret we lack
    (None, anonymous, when that secret is `optional`)."""
    path = options.hf_token_file
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError:
            token = ""
        if token:
            return token
    token = (options.env.get("HF_TOKEN") or "").strip()
    if token:
        return token
    if model.token_secret_ref is not None and not model.token_secret_ref.optional:
        ref = model.token_secret_ref
        raise PreloadError(
            Reason.SECRET_MISSING,
            f"tokenSecretRef {ref.name}/{ref.key} is set but no token was found (file {path or '-'} missing or empty, "
            "HF_TOKEN unset): check that the Secret and key exist in the endpoint's namespace",
        )
    return None


def error(exc: BaseException, what: str, has_token: bool) -> PreloadError:
    """A huggingface_hub/httpx2 failure as a PreloadError with a reason. The token never appears in it."""
    if isinstance(exc, PreloadError):
        return exc
    if isinstance(exc, hf_errors.GatedRepoError):
        hint = (
            "the token's user has not been granted access"
            if has_token
            else "set huggingFaceModel.tokenSecretRef to a token"
        )
        return PreloadError(
            Reason.ACCESS_DENIED, f"{what}: gated repository: accept its conditions on the Hub, and {hint}"
        )
    if isinstance(exc, hf_errors.RevisionNotFoundError):
        return PreloadError(Reason.NOT_FOUND, f"{what}: revision not found (wrong commitSHA?)")
    if isinstance(exc, hf_errors.RepositoryNotFoundError):
        detail = "" if has_token else ", or private and no token was given"
        return PreloadError(Reason.NOT_FOUND, f"{what}: repository not found{detail}")
    if isinstance(exc, hf_errors.EntryNotFoundError):
        return PreloadError(Reason.NOT_FOUND, f"{what}: file not found at this revision")
    if isinstance(exc, hf_errors.HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else 0
        if status in (401, 403):
            return PreloadError(Reason.ACCESS_DENIED, f"{what}: access denied ({status})")
        if status == 404:
            return PreloadError(Reason.NOT_FOUND, f"{what}: not found")
        return PreloadError(Reason.NETWORK_ERROR, f"{what}: HTTP {status}")
    if isinstance(exc, httpx2.HTTPError | ConnectionError | TimeoutError | hf_errors.LocalEntryNotFoundError):
        return PreloadError(Reason.NETWORK_ERROR, f"{what}: {type(exc).__name__}: cannot reach the Hub")
    if isinstance(exc, OSError) and store.is_enospc(exc):
        return store.disk_full(what, exc)
    return PreloadError(Reason.NETWORK_ERROR, f"{what}: {type(exc).__name__}")


class HubSource:
    """A model repository at one commit."""

    def __init__(self, model: HuggingFaceModel, token: str | None, endpoint: str | None, options: Options) -> None:
        self.model, self.token, self.endpoint, self.options = model, token, endpoint, options
        self.api = HfApi(endpoint=endpoint, token=token or False)
        self.commit: str | None = model.commit_sha

    @classmethod
    def from_config(cls, config: ModelSourceConfig, options: Options) -> HubSource:
        if config.hugging_face_model is None:
            raise PreloadError(Reason.INVALID_SOURCE, "modelSourceType huggingface requires huggingFaceModel")
        model = config.hugging_face_model
        return cls(model, read_token(model, options), options.env.get("HF_ENDPOINT") or None, options)

    @property
    def repo(self) -> str:
        return self.model.model_id

    def describe(self) -> dict[str, Any]:
        return {
            "type": "huggingface",
            "modelId": self.repo,
            "commit": self.commit,
            "allowPatterns": self.model.allow_patterns,
            "ignorePatterns": self.model.ignore_patterns,
        }

    def listing(self) -> Listing:
        what = f"huggingface repo {self.repo}"
        try:
            if self.commit is None:
                self.commit = self.api.model_info(self.repo, revision="main").sha
                log.info("no commitSHA given: pinned %s to main's commit %s for this download", self.repo, self.commit)
            what = f"huggingface repo {self.repo}@{self.commit}"
            entries = [
                e
                for e in self.api.list_repo_tree(self.repo, recursive=True, revision=self.commit)
                if isinstance(e, RepoFile)
            ]
        except Exception as exc:
            raise error(exc, what, bool(self.token)) from exc
        chosen = filter_repo_objects(
            entries,
            allow_patterns=self.model.allow_patterns,
            ignore_patterns=self.model.ignore_patterns,
            key=lambda e: e.path,
        )
        files = tuple(
            RemoteFile(
                path=store.safe_relpath(e.path),
                size=int(e.size),
                ref=e.path,
                sha256=e.lfs.sha256 if e.lfs is not None else None,
                git_sha1=None if e.lfs is not None else e.blob_id,
            )
            for e in chosen
        )
        if not files:
            raise PreloadError(Reason.NOT_FOUND, f"{what}: no files (or none matching allowPatterns/ignorePatterns)")
        return Listing(files=files, commit=self.commit)

    def fetch(
        self,
        files: list[RemoteFile],
        part_path: Callable[[RemoteFile], str],
        on_bytes: OnBytes,
        on_done: Callable[[RemoteFile], None],
        scratch: str,
        on_kept: OnBytes | None = None,  # a partial file is started over: nothing is kept
    ) -> None:
        assert self.commit is not None, "listing() comes first"
        counter = _counter_class(on_bytes)

        def one(file: RemoteFile) -> None:
            what = f"huggingface {self.repo}@{self.commit}/{file.ref}"
            try:
                path = hf_hub_download(
                    self.repo,
                    file.ref,
                    revision=self.commit,
                    local_dir=os.path.join(scratch, "files"),
                    cache_dir=os.path.join(scratch, "cache"),
                    token=self.token or False,
                    endpoint=self.endpoint,
                    tqdm_class=counter,
                )
            except Exception as exc:
                raise error(exc, what, bool(self.token)) from exc
            os.replace(path, part_path(file))
            on_done(file)

        workers = max(1, min(self.options.concurrency, MAX_PARALLEL_FILES))
        with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="hf") as pool:
            futures = [pool.submit(one, f) for f in sorted(files, key=lambda f: -f.size)]
            concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
            pool.shutdown(cancel_futures=True)  # one failure fails the preload: files not started are skipped
            failures = [f.exception() for f in futures if not f.cancelled() and f.exception() is not None]
        if failures:
            raise sorted(
                (error(e, self.repo, bool(self.token)) for e in failures if e),
                key=lambda e: e.reason == Reason.NETWORK_ERROR,
            )[0]

    def verifier(self, file: RemoteFile) -> Callable[[str], None]:
        what = f"huggingface {self.repo}@{self.commit}/{file.ref}"

        def verify(path: str) -> None:
            verifying.check_size(path, file.size, what)
            if file.sha256:
                verifying.sha256(path, file.sha256, what)
            elif file.git_sha1:
                verifying.git_blob_sha1(path, file.git_sha1, what)

        return verify

    def authorize(self, files: Sequence[ManifestFile]) -> list[str]:
        """HEAD every cached file with this pod's token (anonymously for a public model) at the pinned commit (else
        main); the paths whose size or content id (LFS sha256, else git blob id) differ from the manifest's."""
        revision = self.commit or "main"
        workers = max(1, min(self.options.concurrency, MAX_PARALLEL_FILES))
        with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="hf-head") as pool:
            same = list(pool.map(lambda f: self._still_cached(f, revision), files))
        return [f.path for f, ok in zip(files, same, strict=True) if not ok]

    def _still_cached(self, file: ManifestFile, revision: str) -> bool:
        what = f"huggingface {self.repo}@{revision}/{file.path}"
        expected = sources.recorded(file)
        try:
            url = hf_hub_url(self.repo, file.path, revision=revision, endpoint=self.endpoint)
            meta = get_hf_file_metadata(url, token=self.token or False)
        except hf_errors.EntryNotFoundError:
            return False  # gone at this revision: the cache is not what the source holds
        except Exception as exc:
            raise error(exc, what, bool(self.token)) from exc
        content_id = expected.get("sha256") or expected.get("git_sha1")
        return bool(meta.size == expected["size"] and content_id and meta.etag == content_id)


def _counter_class(on_bytes: OnBytes) -> type:
    """A tqdm look-alike that huggingface_hub drives; it forwards byte counts and draws nothing."""

    class Counter:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            initial = int(kwargs.get("initial") or 0)
            if initial:
                on_bytes(initial)

        def __enter__(self) -> Counter:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def update(self, n: int | float | None = 1) -> None:
            if n:
                on_bytes(int(n))

        def close(self) -> None:
            pass

        def set_description(self, *args: Any, **kwargs: Any) -> None:
            pass

    return Counter
