"""Outcomes of a preload: reasons, exit codes and the termination message the operator reads.

This module is pure (no I/O beyond writing the termination log) so the operator can import it to
classify a failed preload Job from its exit code or its termination message.
"""

from __future__ import annotations

import dataclasses
import json
import os
from enum import StrEnum


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
    NOT_FOUND = "NotFound"
    ACCESS_DENIED = "AccessDenied"
    EULA_NOT_ACCEPTED = "EulaNotAccepted"
    CHECKSUM_MISMATCH = "ChecksumMismatch"
    INVALID_SOURCE = "InvalidSource"
    PATH_ESCAPE = "PathEscape"
    NETWORK_ERROR = "NetworkError"
    SECRET_MISSING = "SecretMissing"
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
RETRYABLE_REASONS: frozenset[Reason] = frozenset({Reason.NETWORK_ERROR})

SUCCESS_REASONS: frozenset[Reason] = frozenset({Reason.DOWNLOADED, Reason.ALREADY_PRESENT, Reason.DELETED, Reason.RESOLVED})

#: Exit code -> the reason it stands for (the retryable code maps to NetworkError).
REASON_BY_EXIT_CODE: dict[int, Reason] = {code: reason for reason, code in PERMANENT_EXIT_CODES.items()} | {
    EXIT_RETRYABLE: Reason.NETWORK_ERROR
}


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


class PreloadError(Exception):
    """A failure with a reason: raised anywhere in the preload, turned into a Result at the top."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclasses.dataclass(frozen=True)
class Result:
    """What a preload did; serialised as the container's termination message."""

    reason: Reason
    message: str
    bytes: int = 0
    seconds: float = 0.0
    files: int = 0

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
            "message": self.message[:2000],
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "files": self.files,
            "retryable": self.retryable,
        }
        return json.dumps(body, separators=(",", ":"))


def parse(message: str) -> Result | None:
    """Read a termination message back (the operator's side); None if it is not one of ours."""
    try:
        body = json.loads(message)
        return Result(
            reason=Reason(body["reason"]),
            message=str(body.get("message", "")),
            bytes=int(body.get("bytes", 0)),
            seconds=float(body.get("seconds", 0.0)),
            files=int(body.get("files", 0)),
        )
    except (ValueError, KeyError, TypeError):
        return None


def write_termination_log(path: str | None, result: Result) -> bool:
    """Write the result to `path` if its directory exists (it does in a pod); True if written."""
    if not path or not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        return False
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(result.to_json())
    except OSError:
        return False
    return True
