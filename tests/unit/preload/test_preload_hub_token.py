"""The Hub token of a preload: a missing Secret fails the preload, unless tokenSecretRef says it is optional."""

from __future__ import annotations

from pathlib import Path

import pytest

from warmstart.api.preloading import Reason
from warmstart.api.sources import HuggingFaceModel
from warmstart.preload.results import PreloadError
from warmstart.preload.sources import Options
from warmstart.preload.sources.hf import read_token


def model(optional: bool | None) -> HuggingFaceModel:
    return HuggingFaceModel.model_validate(
        {"modelId": "org/model", "tokenSecretRef": {"name": "hf", "key": "token", "optional": optional}}
    )


def test_a_missing_required_token_is_secret_missing(tmp_path: Path) -> None:
    options = Options(hf_token_file=str(tmp_path / "absent"), env={})
    with pytest.raises(PreloadError) as raised:
        read_token(model(None), options)
    assert raised.value.reason == Reason.SECRET_MISSING


def test_a_missing_optional_token_downloads_anonymously(tmp_path: Path) -> None:
    assert read_token(model(True), Options(hf_token_file=str(tmp_path / "absent"), env={})) is None


def test_a_present_optional_token_is_used(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("hf_abc\n")
    assert read_token(model(True), Options(hf_token_file=str(tmp_path / "token"), env={})) == "hf_abc"
