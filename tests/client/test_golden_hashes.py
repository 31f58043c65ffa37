"""Task hashes do not change by accident: the digests of the equality corpus and of
representative values, functions and graphs equal those recorded in
``golden_hashes.json`` (see ``tests/client/_golden.py`` for when and how to re-record)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from tests.client._corpus_values import write_inputs
from tests.client._golden import GOLDEN, compute, environment


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def h5_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("golden") / "data.h5"
    with h5py.File(path, "w") as f:
        f["data"] = np.arange(200.0).reshape(20, 10)
    write_inputs(path.parent)  # the IO entries' files (their hashes are not pinned)
    return str(path)


def test_recorded_in_this_environment(recorded):
    """Hashes name library versions and ``KEY_VERSION``: the comparisons below are only
    meaningful with the versions the file was recorded with."""
    assert recorded["environment"] == environment(), (
        "golden_hashes.json was recorded with other versions: after a deliberate change "
        "(KEY_VERSION bumped) or an upgrade, re-record with "
        "`python -m tests.client._golden --write`")


def _check(recorded: dict, group: str, h5_path: str) -> None:
    current = compute(group, h5_path)
    assert set(current) == set(recorded[group])
    changed = sorted(name for name in recorded[group]
                     if current[name] != recorded[group][name])
    assert not changed, (f"{len(changed)} {group} hash differently than recorded: {changed}. "
                         "A deliberate encoding change bumps KEY_VERSION and re-records "
                         "(python -m tests.client._golden --write)")


@pytest.mark.parametrize("group", ["values", "functions", "graphs"])
def test_hashes_equal_the_recorded_ones(recorded, h5_path, group):
    _check(recorded, group, h5_path)


@pytest.mark.slow
def test_corpus_hashes_equal_the_recorded_ones(recorded, h5_path):
    _check(recorded, "corpus", h5_path)


def test_pinned_hashes_are_distinct_and_not_volatile(recorded):
    for group in ("values", "functions"):
        hashes = recorded[group]
        assert "volatile" not in ",".join(hashes.values()), group
        assert len(set(hashes.values())) == len(hashes), group
