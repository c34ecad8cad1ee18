"""Bundled real traces carry no credentials: recorders' environments end up in trace metadata
(two TraceLens traces held a Hugging Face access token in ``metadata.env``)."""

from __future__ import annotations

import gzip
import re

import pytest

from tests.conftest import DATA

TOKEN = re.compile(
    rb"hf_[A-Za-z0-9]{30,}|ghp_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|AKIA[0-9A-Z]{16}"
    rb"|xox[bap]-[A-Za-z0-9-]{20,}|sk-[A-Za-z0-9]{40,}"
)
FILES = sorted(p for p in DATA.rglob("*") if p.is_file() and p.suffix in (".gz", ".json", ".sqlite", ".csv", ".jsonl"))


@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_no_credential_in_bundled_data(path):
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    m = TOKEN.search(raw)
    assert m is None, (
        f"{path.name} holds what looks like a credential at byte {m.start()}: redact it and say so in NOTICE.md"
    )
