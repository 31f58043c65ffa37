"""max_body_bytes: 413 up front (Content-Length, dtype and shape) and while streaming."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import FreshServer
from tests.server.wire import encode_array, encode_pickle, new_hash, put

pytestmark = pytest.mark.slow


def stored_files(data_dir: Path) -> list[Path]:
    return [p for p in (data_dir / "objects").rglob("*") if p.is_file()]


def test_bodies_over_the_limit_are_413_without_effects(fresh_server: FreshServer) -> None:
    server = fresh_server(max_body_bytes=1000)
    with httpx.Client(base_url=server.url) as client:
        small = encode_pickle(b"x" * 100)
        assert put(client, new_hash(), small).status_code == 201
        files = stored_files(server.data_dir)
        big = encode_pickle(b"x" * 5000)
        task_hash = new_hash()
        cases = {
            "content-length": put(client, task_hash, big),
            "streamed": put(client, task_hash, big, stream=True),
            "dtype and shape": put(client, task_hash, encode_array(np.zeros(1000))),
        }
        for case, response in cases.items():
            assert response.status_code == 413, case
            assert "max_body_bytes" in response.json()["detail"]
        assert client.get(f"/v1/entries/{task_hash}").status_code == 404
        assert stored_files(server.data_dir) == files
        assert client.get("/v1/stats").json()["stores"] == 1
        # A body right at the limit is fine.
        assert put(client, task_hash, encode_array(np.zeros(125))).status_code == 201
