"""The ``warmstart cluster image build|run`` command: build the local cluster's images, push them, run one."""

from __future__ import annotations

import argparse
import logging
import sys

from warmstart.localcluster import imagestore, imaging, launching, pushing, stepping


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        if args.command == "build":
            return _build(args.only, args.push)
        rest = args.args[1:] if args.args[:1] == ["--"] else args.args
        outcome = launching.run(
            imagestore.store(),
            args.image,
            args=rest or None,
            entrypoint=[args.entrypoint] if args.entrypoint else None,
            timeout=args.timeout,
        )
        sys.stdout.write(outcome.stdout)
        sys.stderr.write(outcome.stderr)
        return outcome.code
    except (stepping.StepError, ValueError) as error:
        print(f"warmstart cluster image {args.command}: {error}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="warmstart cluster image", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    kinds = ",".join(kind.value for kind in imaging.DEFAULT_KINDS)
    every = ",".join(kind.value for kind in imaging.Kind)
    build = commands.add_parser(
        "build",
        help="build the project image (from the Dockerfile), the pause and the shell-less image; "
        "first time ~5 min, then seconds",
        description="Prints one line per image: KIND REFERENCE (the pushed reference with --push).",
    )
    build.add_argument("--only", default=kinds, help=f"comma-separated subset of {every} (default: {kinds})")
    build.add_argument(
        "--push", metavar="HOST:PORT", help="also push to this plain-HTTP registry (e.g. 127.0.0.1:5000)"
    )
    run = commands.add_parser(
        "run",
        help="run an image of the local store with runc, as a pod would (read-only root, /tmp tmpfs, no network)",
    )
    run.add_argument("image", help="reference in the local store, e.g. localhost/warmstart:0.1.0-<key>")
    run.add_argument("--entrypoint", help="replace the image's ENTRYPOINT (and drop its CMD), like a pod's command")
    run.add_argument("--timeout", type=float, default=300.0, help="seconds before the container is killed")
    run.add_argument("args", nargs=argparse.REMAINDER, help="replace the image's CMD, like a pod's args (after --)")
    return parser


def _build(only: str, registry: str | None) -> int:
    try:
        kinds = [imaging.Kind(name.strip()) for name in only.split(",") if name.strip()]
    except ValueError as error:
        raise ValueError(f"--only: {error}") from None
    for kind, image in imaging.build(kinds).items():
        reference = pushing.push(image, registry) if registry else _local_reference(image)
        print(f"{kind.value:<10} {reference}")
    return 0


def _local_reference(image: imagestore.LocalImage) -> str:
    """How local tools name it: the store name for buildah images, the ``oci:`` path for the layout's."""
    if image.source.startswith("containers-storage:"):
        return image.source.split("]", 1)[1]
    return image.source
