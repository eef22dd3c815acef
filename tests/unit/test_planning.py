"""`warmstart plan`: the seeds' figures, linear NVMe use, times, parsing, and listing an S3 source (moto server)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import boto3
import pytest

from warmstart import placement, planning

GB = 10**9


def test_300gb_does_not_fit_g5_xlarge_and_says_so_plainly() -> None:
    (row,) = planning.plan(300 * GB, [("ml.g5.xlarge", 4)])
    assert not row.fits
    assert row.nvme_bytes_per_node == 250 * GB
    assert row.needed_bytes_per_node == 315 * GB
    assert row.used_bytes_total == 0
    assert row.message == "300 GB model does not fit ml.g5.xlarge: 315.0 GB needed with margin, 250 GB NVMe"


def test_145gb_fits_g5_24xlarge() -> None:
    (row,) = planning.plan(145 * GB, [("ml.g5.24xlarge", 1)])
    assert row.fits and row.capacity_known
    assert row.free_bytes_per_node == 3800 * GB - 145 * GB
    assert row.message.startswith("145 GB model fits ml.g5.24xlarge")


def test_nvme_use_grows_linearly_with_nodes() -> None:
    rows = planning.plan(145 * GB, [("ml.g5.24xlarge", n) for n in (1, 2, 4, 7)])
    assert [r.used_bytes_total for r in rows] == [145 * GB * n for n in (1, 2, 4, 7)]
    assert [r.nvme_bytes_total for r in rows] == [3800 * GB * n for n in (1, 2, 4, 7)]
    assert [r.source_bytes_per_second for r in rows] == [planning.DEFAULT_BANDWIDTH * n for n in (1, 2, 4, 7)]


def test_times_first_fill_at_bandwidth_and_warm_read_at_7_gb_per_second() -> None:
    (row,) = planning.plan(145 * GB, [("ml.g5.24xlarge", 4)], bandwidth=planning.parse_rate("1.25GB/s"))
    assert row.first_fill_seconds == pytest.approx(116.0)  # 145 GB / 1.25 GB/s, per node, nodes in parallel
    assert row.warm_read_seconds == pytest.approx(145 / 7)
    assert planning.duration(row.first_fill_seconds) == "1m 56s"


def test_the_plan_uses_the_operators_table_and_margin() -> None:
    for instance_type, size_gb in placement.NVME_GB.items():
        (row,) = planning.plan(100 * GB, [(instance_type, 1)])
        assert row.nvme_bytes_per_node == size_gb * GB
        assert row.needed_bytes_per_node == placement.required_bytes(100 * GB)
        assert row.fits == placement.check_capacity(100 * GB, size_gb * GB).fits


def test_unknown_type_is_reported_and_an_override_settles_it() -> None:
    (unknown,) = planning.plan(100 * GB, [("ml.z9.xlarge", 1)])
    assert not unknown.capacity_known and "unknown" in unknown.message
    (known,) = planning.plan(100 * GB, [("ml.z9.xlarge", 1)], capacity_overrides={"ml.z9.xlarge": 50 * GB})
    assert not known.fits and known.capacity_known


@pytest.mark.parametrize(
    ("text", "expected"),
    [("300GB", 300 * GB), ("1.5TB", 1_500 * GB), ("512GiB", 512 * 2**30), ("42", 42), ("0.5 gb", GB // 2)],
)
def test_parse_size(text: str, expected: int) -> None:
    assert planning.parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1.25GB/s", 1.25 * GB), ("10Gbps", 1.25 * GB), ("10Gbit/s", 1.25 * GB), ("500MB/s", 0.5 * GB)],
)
def test_parse_rate(text: str, expected: float) -> None:
    assert planning.parse_rate(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["fast", "0GB/s", "3 parsecs/s"])
def test_bad_rates_are_refused(text: str) -> None:
    with pytest.raises(planning.PlanError):
        planning.parse_rate(text)


def test_parse_target() -> None:
    assert planning.parse_target("ml.g5.xlarge=4") == ("ml.g5.xlarge", 4)
    assert planning.parse_target("ml.g5.xlarge") == ("ml.g5.xlarge", 1)
    with pytest.raises(planning.PlanError):
        planning.parse_target("ml.g5.xlarge=zero")


def test_main_prints_the_table_and_the_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    code = planning.main(
        ["--size", "300GB", "--instance-type", "ml.g5.xlarge=4", "--instance-type", "ml.g5.24xlarge=4"]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "300 GB model does not fit ml.g5.xlarge: 315.0 GB needed with margin, 250 GB NVMe" in out
    assert "ml.g5.24xlarge  4" in out and "1200.0 GB" in out


def test_main_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert planning.main(["--size-bytes", str(145 * GB), "--instance-type", "ml.g5.24xlarge=2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["allFit"] is True
    assert data["rows"][0]["usedBytesTotal"] == 290 * GB
    assert data["rows"][0]["instanceType"] == "ml.g5.24xlarge"


def test_main_bad_input_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert planning.main(["--size", "lots"]) == 2
    assert "cannot read size" in capsys.readouterr().err


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real S3 API (moto's server) on a free local port, found by boto3 through AWS_ENDPOINT_URL_S3."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for name, value in {
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-west-2",
    }.items():
        monkeypatch.setenv(name, value)
    yield endpoint
    server.stop()


def test_source_json_lists_s3_and_sums_sizes(s3_endpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
    s3 = boto3.client("s3", region_name="us-west-2")
    s3.create_bucket(Bucket="models", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    for name, size in {
        "a/config.json": 100,
        "a/model-1.safetensors": 3000,
        "a/model-2.safetensors": 2000,
        "ab/other": 7,
    }.items():
        s3.put_object(Bucket="models", Key=name, Body=b"x" * size)
    for location in ("a/", "a"):  # the folder "a", as the preloader would cache it: "ab/other" is not in it
        source = {
            "modelSourceType": "s3",
            "s3Storage": {"bucketName": "models", "region": "us-west-2"},
            "modelLocation": location,
        }
        assert planning.main(["--source-json", json.dumps(source), "--instance-type", "ml.g5.xlarge", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["modelBytes"] == 5100


def test_source_json_with_an_empty_prefix_is_a_clear_error(
    s3_endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    boto3.client("s3", region_name="us-west-2").create_bucket(
        Bucket="empty", CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
    )
    source = {
        "modelSourceType": "s3",
        "s3Storage": {"bucketName": "empty", "region": "us-west-2"},
        "modelLocation": "m",
    }
    assert planning.main(["--source-json", json.dumps(source)]) == 2
    assert "s3://empty/m/: no objects under this prefix" in capsys.readouterr().err


def test_fsx_source_asks_for_a_size(capsys: pytest.CaptureFixture[str]) -> None:
    source = {"modelSourceType": "fsx", "fsxStorage": {"fileSystemId": "fs-0123456789abcdef0"}}
    assert planning.main(["--source-json", json.dumps(source)]) == 2
    assert "--size" in capsys.readouterr().err


def test_several_models_per_node_count_together_with_the_largest_margin(capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = planning.plan([100 * GB, 120 * GB], [("ml.g5.2xlarge", 2)])  # 450 GB NVMe
    assert row.models == 2 and row.fits
    assert row.needed_bytes_per_node == 220 * GB + placement.margin_bytes(120 * GB)
    assert row.used_bytes_total == 2 * 220 * GB
    (tight,) = planning.plan([200 * GB, 240 * GB], [("ml.g5.2xlarge", 1)])
    assert not tight.fits and "2 models (440 GB) do not fit ml.g5.2xlarge" in tight.message
    code = planning.main(["--size", "100GB", "--size", "120GB", "--instance-type", "ml.g5.2xlarge", "--json"])
    assert code == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["models"] == [100 * GB, 120 * GB] and shown["modelBytes"] == 220 * GB
    assert planning.main(["--size", "200GB", "--size-bytes", str(240 * GB), "--instance-type", "ml.g5.2xlarge"]) == 1
