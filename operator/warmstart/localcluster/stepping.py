"""Running one long image-build command: full output to a log file, its milestones to the console with elapsed time.

A first-time image build takes minutes. Instead of minutes of silence, each line of the command's output that
matches a milestone pattern (mmdebstrap's ``I: downloading packages``, buildah's ``STEP 3/7``) is logged with the
seconds since the step began; everything else goes only to the log, whose tail ends the error when the command fails.
"""

from __future__ import annotations

import logging
import pathlib
import re
import subprocess
import time
from collections.abc import Mapping, Sequence

logger = logging.getLogger(__name__)

#: heavy steps run at this niceness, so that a build shares the 2 cores with whatever else runs
NICENESS = 10
_TAIL_CHARS = 4000


class StepError(RuntimeError):
    """A build command failed; the message ends with the tail of its log."""


def run(
    label: str,
    command: Sequence[str],
    log_path: pathlib.Path,
    milestones: re.Pattern[str] | None = None,
    cwd: pathlib.Path | None = None,
    env: Mapping[str, str] | None = None,
    nice: bool = True,
) -> float:
    """Run ``command``; log matching output lines as ``label [12 s] line``; return the wall seconds it took."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = ["nice", "-n", str(NICENESS), *command] if nice else list(command)
    started = time.monotonic()
    with log_path.open("a") as log:
        log.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} $ {' '.join(argv)}\n")
        log.flush()
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            if milestones is not None and milestones.search(line):
                log.flush()
                logger.info("%s [%3.0f s] %s", label, time.monotonic() - started, line.rstrip()[:160])
        code = process.wait()
    elapsed = time.monotonic() - started
    if code != 0:
        tail = log_path.read_text(errors="replace")[-_TAIL_CHARS:]
        raise StepError(f"{label}: {' '.join(command)} failed ({code}) after {elapsed:.0f} s; log {log_path}:\n{tail}")
    return elapsed


def output(command: Sequence[str], cwd: pathlib.Path | None = None) -> str:
    """Run a quick command and return its stdout; raise StepError with its stderr if it fails."""
    done = subprocess.run(list(command), cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StepError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-_TAIL_CHARS:]}")
    return done.stdout


def succeeds(command: Sequence[str]) -> bool:
    """Whether a quick command exits 0 (its output is discarded)."""
    return subprocess.run(list(command), capture_output=True, check=False).returncode == 0
