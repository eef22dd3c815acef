"""`warmstart plan`: will a model (or several per node) fit each instance type's NVMe, its use, and the fill time.

The NVMe table and the margin are the operator's own (warmstart.placement), so the plan and the operator's capacity
pre-check always agree. The cache is per node: NVMe use grows linearly with the node count, and the first fill
downloads the whole model once on every node (in parallel, so the source sees nodes x bandwidth). A warm start then
reads the model from local NVMe at --warm-read (an assumed 7 GB/s by default, not measured here). Several models per
node (repeat --size or --source-json) are planned as the operator checks them: their sizes plus the largest margin,
whichever is preloaded last.

Computation is pure; I/O lives in `source_bytes` (the preloader's listing of a source) and `main` (arguments, printing).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from warmstart import placement
from warmstart.api.sources import ModelSourceConfig, ModelSourceType
from warmstart.preload import sources
from warmstart.preload.results import PreloadError

GB = placement.GB
DEFAULT_BANDWIDTH = 1.25 * GB  # bytes/s: a 10 Gbit/s link, fully used
WARM_READ = 7 * GB  # bytes/s: local NVMe read, as reported for HyperPod nodes

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
}  # fmt: skip
_BITS = {"bps": 1, "kbps": 10**3, "mbps": 10**6, "gbps": 10**9, "tbps": 10**12}
_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*$")


class PlanError(ValueError):
    """An input the planner cannot use; the message says which and why."""


def parse_size(text: str) -> int:
    """'300GB', '1.5TB', '512GiB', '300' (bytes) -> bytes. Decimal units are powers of 10, binary ones of 2."""
    match = _NUMBER.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise PlanError(f"cannot read size {text!r}: use e.g. 300GB, 1.5TB or 512GiB")
    return int(float(match.group(1)) * _UNITS[unit])


def parse_rate(text: str) -> float:
    """'1.25GB/s', '500MiB/s', '10Gbps', '10Gbit/s' -> bytes per second."""
    cleaned = text.strip().replace("bit/s", "bps").replace("Bit/s", "bps")
    match = _NUMBER.match(cleaned.removesuffix("/s"))
    if match:
        unit = match.group(2).lower()
        if cleaned.endswith("/s") and unit in _UNITS:
            value = float(match.group(1)) * _UNITS[unit]
            if value > 0:
                return value
        elif unit in _BITS:
            value = float(match.group(1)) * _BITS[unit] / 8
            if value > 0:
                return value
    raise PlanError(f"cannot read bandwidth {text!r}: use e.g. 1.25GB/s, 500MiB/s or 10Gbps")


def parse_target(text: str) -> tuple[str, int]:
    """'ml.g5.xlarge=4' -> ('ml.g5.xlarge', 4); 'ml.g5.xlarge' -> one node."""
    name, _, count = text.partition("=")
    name = name.strip()
    if not name:
        raise PlanError(f"cannot read instance type {text!r}: use TYPE or TYPE=COUNT, e.g. ml.g5.24xlarge=4")
    if not count:
        return name, 1
    if not count.strip().isdigit() or int(count) < 1:
        raise PlanError(f"node count in {text!r} must be a positive whole number")
    return name, int(count)


def parse_capacity(text: str) -> tuple[str, int]:
    """'ml.custom.xlarge=500GB' -> ('ml.custom.xlarge', 500 * 10**9): an override of the NVMe table."""
    name, sep, size = text.partition("=")
    if not sep or not name.strip():
        raise PlanError(f"cannot read capacity {text!r}: use TYPE=SIZE, e.g. ml.custom.xlarge=500GB")
    return name.strip(), parse_size(size)


@dataclass(frozen=True)
class Row:
    """The plan for one instance type and node count."""

    instance_type: str
    #: models sharing each node
    models: int
    nodes: int
    fits: bool
    capacity_known: bool
    nvme_bytes_per_node: int | None
    needed_bytes_per_node: int
    used_bytes_per_node: int
    used_bytes_total: int
    nvme_bytes_total: int | None
    free_bytes_per_node: int | None
    first_fill_seconds: float
    source_bytes_per_second: float
    warm_read_seconds: float
    message: str


def _sizes(model_bytes: int | Sequence[int]) -> list[int]:
    return [model_bytes] if isinstance(model_bytes, int) else list(model_bytes)


def plan_one(
    model_bytes: int | Sequence[int],
    instance_type: str,
    nodes: int,
    *,
    bandwidth: float = DEFAULT_BANDWIDTH,
    warm_read: float = WARM_READ,
    capacity_overrides: dict[str, int] | None = None,
) -> Row:
    """Plan one instance type: the fit (same check as the operator's), NVMe use, fill and warm-read times.

    `model_bytes`: one model, or the models that share each node.
    """
    sizes = _sizes(model_bytes)
    total = sum(sizes)
    override = (capacity_overrides or {}).get(instance_type)
    capacity = override if override is not None else placement.nvme_capacity_bytes(instance_type)
    check = placement.check_capacity(sizes[0] if len(sizes) == 1 else sizes, capacity)
    known = capacity is not None
    used = total if check.fits else 0
    return Row(
        instance_type=instance_type,
        models=len(sizes),
        nodes=nodes,
        fits=check.fits,
        capacity_known=known,
        nvme_bytes_per_node=capacity,
        needed_bytes_per_node=check.needed_bytes,
        used_bytes_per_node=used,
        used_bytes_total=used * nodes,
        nvme_bytes_total=capacity * nodes if capacity is not None else None,
        free_bytes_per_node=capacity - used if capacity is not None else None,
        first_fill_seconds=total / bandwidth,
        source_bytes_per_second=bandwidth * nodes,
        warm_read_seconds=max(sizes) / warm_read,
        message=sentence(total, instance_type, check, len(sizes)),
    )


def plan(
    model_bytes: int | Sequence[int],
    targets: list[tuple[str, int]],
    *,
    bandwidth: float = DEFAULT_BANDWIDTH,
    warm_read: float = WARM_READ,
    capacity_overrides: dict[str, int] | None = None,
) -> list[Row]:
    """Plan every (instance type, node count), in the order given."""
    if not _sizes(model_bytes) or any(size <= 0 for size in _sizes(model_bytes)):
        raise PlanError("the model size must be positive")
    if bandwidth <= 0 or warm_read <= 0:
        raise PlanError("bandwidths must be positive")
    return [
        plan_one(
            model_bytes, name, nodes, bandwidth=bandwidth, warm_read=warm_read, capacity_overrides=capacity_overrides
        )
        for name, nodes in targets
    ]


def gb(value: int | float) -> str:
    """Decimal gigabytes, as the NVMe table and AWS state them: '250 GB', '315.0 GB'."""
    return f"{value / GB:.1f} GB"


def _whole_gb(value: int) -> str:
    return f"{value / GB:.0f} GB" if value % GB == 0 else gb(value)


def sentence(model_bytes: int, instance_type: str, check: placement.CapacityCheck, models: int = 1) -> str:
    """One plain sentence about the fit (`model_bytes`: all `models` together)."""
    size = _whole_gb(model_bytes) if models == 1 else f"{models} models ({_whole_gb(model_bytes)})"
    if check.capacity_bytes is None:
        return (
            f"NVMe capacity of {instance_type} is unknown (not in the table): give it with --capacity "
            f"{instance_type}=SIZE; the preload still checks free space before writing"
        )
    verb = ("fits" if check.fits else "does not fit") if models == 1 else ("fit" if check.fits else "do not fit")
    noun = " model" if models == 1 else ""
    return (
        f"{size}{noun} {verb} {instance_type}: {gb(check.needed_bytes)} needed with margin, "
        f"{_whole_gb(check.capacity_bytes)} NVMe"
    )


def rate(bytes_per_second: float) -> str:
    """'1.25 GB/s'."""
    return f"{bytes_per_second / GB:.3g} GB/s"


def duration(seconds: float) -> str:
    """'42s', '4m 00s', '1h 05m'."""
    whole = round(seconds)
    if whole < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def table(model_bytes: int | Sequence[int], rows: list[Row], bandwidth: float, warm_read: float) -> str:
    """The human-readable plan: a header, one line per instance type, then the sentences that need reading."""
    header = [
        "INSTANCE TYPE",
        "NODES",
        "FITS",
        "NVME/NODE",
        "NEEDED/NODE",
        "USED/NODE",
        "USED TOTAL",
        "FIRST FILL",
        "WARM READ",
    ]
    body = [
        [
            r.instance_type,
            str(r.nodes),
            ("yes" if r.fits else "NO") if r.capacity_known else "unknown",
            _whole_gb(r.nvme_bytes_per_node) if r.nvme_bytes_per_node is not None else "?",
            gb(r.needed_bytes_per_node),
            gb(r.used_bytes_per_node) if r.fits else "-",
            gb(r.used_bytes_total) if r.fits else "-",
            duration(r.first_fill_seconds),
            duration(r.warm_read_seconds),
        ]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = [
        f"{_models(model_bytes)}; first fill at {rate(bandwidth)} per node; warm read at {rate(warm_read)}",
        "",
        *(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
            for line in [header, *body]
        ),
    ]
    notes = [r.message for r in rows if not r.fits or not r.capacity_known]
    fits = [r for r in rows if r.fits and r.capacity_known]
    if fits:
        notes.append(
            "NVMe use grows linearly with nodes; the first fill downloads the model once per node "
            f"(the source serves up to {rate(max(r.source_bytes_per_second for r in fits))} during a fill)"
        )
    return "\n".join([*lines, "", *notes]) if notes else "\n".join(lines)


def _models(model_bytes: int | Sequence[int]) -> str:
    sizes = _sizes(model_bytes)
    if len(sizes) == 1:
        return f"model {gb(sizes[0])}"
    return f"{len(sizes)} models per node ({', '.join(gb(s) for s in sizes)}; {gb(sum(sizes))} together)"


def as_json(model_bytes: int | Sequence[int], rows: list[Row], bandwidth: float, warm_read: float) -> dict[str, Any]:
    """The plan as a JSON-ready dict with camelCase keys."""

    def camel(name: str) -> str:
        first, *rest = name.split("_")
        return first + "".join(part.title() for part in rest)

    sizes = _sizes(model_bytes)
    return {
        "modelBytes": sum(sizes),
        "models": sizes,
        "bandwidthBytesPerSecond": bandwidth,
        "warmReadBytesPerSecond": warm_read,
        "allFit": all(r.fits for r in rows),
        "rows": [{camel(k): v for k, v in asdict(r).items()} for r in rows],
    }


def source_bytes(source: ModelSourceConfig) -> int:
    """Measure a source with the preloader's own listing: S3 or the Hub.

    S3 honours AWS_ENDPOINT_URL_S3 and s3Storage.endpointUrl.
    """
    if source.model_source_type not in (ModelSourceType.S3, ModelSourceType.HUGGINGFACE):
        raise PlanError(f"cannot list a {source.model_source_type.value} source from here: give the size with --size")
    try:
        return sources.list_source(source).total_bytes
    except PreloadError as error:
        raise PlanError(f"cannot measure the source: {error.message}") from error


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="warmstart plan",
        description="Plan NVMe capacity, first-fill and warm-start times for a model across instance types.",
        epilog="Exit status: 0 when the model fits every --instance-type given (or, without any, at least one type "
        "in the table), 1 when it does not, 2 on bad input or a source that cannot be listed.",
    )
    parser.add_argument(
        "--size", action="append", default=[],
        help="model size, e.g. 300GB, 1.5TB, 512GiB (decimal GB = 10^9 bytes); repeat for several models per node",
    )  # fmt: skip
    parser.add_argument("--size-bytes", type=int, action="append", default=[], help="model size in bytes; repeatable")
    parser.add_argument(
        "--source-json", action="append", default=[],
        help="a modelSourceConfig (camelCase JSON) to list: s3 or huggingface; repeatable",
    )  # fmt: skip
    parser.add_argument(
        "--instance-type", action="append", default=[], metavar="TYPE[=NODES]",
        help="instance type and node count, repeatable (default: every type in the table, one node each)",
    )  # fmt: skip
    parser.add_argument(
        "--capacity", action="append", default=[], metavar="TYPE=SIZE", help="NVMe capacity of a type not in the table"
    )
    parser.add_argument(
        "--bandwidth", default="1.25GB/s", help="per-node download bandwidth for the first fill (default 1.25GB/s)"
    )
    parser.add_argument(
        "--warm-read",
        default="7GB/s",
        help="local NVMe read bandwidth (default 7GB/s: an assumed NVMe rate, measure your nodes')",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def main(argv: list[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not (args.size or args.size_bytes or args.source_json):
        parser.error("give at least one model: --size, --size-bytes or --source-json")
    try:
        model_bytes = [
            *(parse_size(text) for text in args.size),
            *args.size_bytes,
            *(source_bytes(ModelSourceConfig.model_validate(json.loads(raw))) for raw in args.source_json),
        ]
        targets = [parse_target(t) for t in args.instance_type] or [(name, 1) for name in placement.NVME_GB]
        overrides = dict(parse_capacity(c) for c in args.capacity)
        bandwidth, warm_read = parse_rate(args.bandwidth), parse_rate(args.warm_read)
        rows = plan(model_bytes, targets, bandwidth=bandwidth, warm_read=warm_read, capacity_overrides=overrides)
    except (PlanError, ValueError) as error:  # pydantic's ValidationError and json's errors are ValueErrors
        print(f"warmstart plan: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(as_json(model_bytes, rows, bandwidth, warm_read), indent=2))
    else:
        print(table(model_bytes, rows, bandwidth, warm_read))
    ok = all(r.fits for r in rows) if args.instance_type else any(r.fits for r in rows)
    return 0 if ok else 1
