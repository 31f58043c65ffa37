"""Trust round 3 over HTTP, in process (``create_app`` on a real Redis): stored metadata is
checked on the way in, state-changing requests a web page could send are refused with or
without tokens, and wrong tokens are throttled per client address (issue 29, rows 2-4, 12;
the browser's side is tests/server/test_cross_site_browser.py)."""

from __future__ import annotations

import re

import httpx
import numpy as np
import pytest

from client_lib.wire import batch
from tests.server.conftest import MakeApp
from tests.server.wire import encode_array, encode_pickle, new_hash

pytestmark = pytest.mark.anyio

READER, WRITER = "reader-" + "r" * 32, "writer-" + "w" * 32
BATCH = {"Content-Type": batch.MEDIA_TYPE}
FOREIGN = "http://127.0.0.1:9"  # another port of the same host


def batch_item(task_hash: str, **fields: object) -> tuple[dict, bytes]:
    encoded = encode_pickle({"x": 1})
    meta = {"hash": task_hash, "kind": "pickle", "digest": encoded.digest,
            "compute_seconds": 1.0, "label": "t", "nbytes": len(encoded.body), **fields}
    return meta, encoded.body


async def test_stored_fields_are_checked_on_the_way_in(make_app: MakeApp) -> None:
    client = await make_app()
    evil, good = new_hash(), new_hash()
    body = batch.pack([batch_item(good, type="builtins.dict"),
                       batch_item(evil, type="builtins.dict\r\nX-Evil: 1")])
    refused = await client.post("/v1/objects/batch", content=body, headers=BATCH)
    assert refused.status_code == 422 and "X-Result-Type" in refused.json()["detail"]
    assert (await client.get(f"/v1/entries/{evil}")).status_code == 404
    assert (await client.get(f"/v1/entries/{good}")).status_code == 404  # the batch as one
    body = batch.pack([batch_item(good, type="builtins.dict")])
    stored = await client.post("/v1/objects/batch", content=body, headers=BATCH)
    assert stored.json()["results"][0]["status"] == 201
    got = await client.get(f"/v1/objects/{good}")
    assert got.headers["X-Result-Type"] == "builtins.dict"
    assert not [v for v in got.headers.values() if "\r" in v or "\n" in v]
    labelled = batch.pack([batch_item(new_hash(), label="a\r\nb")])
    bad_label = await client.post("/v1/objects/batch", content=labelled, headers=BATCH)
    assert bad_label.status_code == 422 and "control" in bad_label.json()["detail"]
    encoded = encode_array(np.arange(3.0))
    put = await client.put(f"/v1/objects/{new_hash()}", content=encoded.body,
                           headers={**encoded.headers(), "X-Result-Type": "a;b=c d"})
    assert put.status_code == 422 and "X-Result-Type" in put.json()["detail"]


async def test_what_a_web_page_could_send_is_refused_without_tokens(make_app: MakeApp) -> None:
    client = await make_app()  # the loopback default: no tokens
    task_hash = new_hash()
    planted = batch.pack([batch_item(task_hash)])
    for headers in ({"Content-Type": "text/plain;charset=UTF-8"}, {},
                    {"Content-Type": "application/x-www-form-urlencoded"}):
        answer = await client.post("/v1/objects/batch", content=planted, headers=headers)
        assert answer.status_code == 415, headers
    foreign = await client.post("/v1/objects/batch", content=planted,
                                headers={**BATCH, "Origin": FOREIGN})
    assert foreign.status_code == 403 and "another origin" in foreign.json()["detail"]
    cross = await client.post("/v1/leases", json={"hashes": [task_hash], "ttl": 60},
                              headers={"Sec-Fetch-Site": "same-site"})
    assert cross.status_code == 403
    text = await client.post("/v1/lookup", content='{"hashes": []}',
                             headers={"Content-Type": "text/plain"})
    assert text.status_code == 415
    assert (await client.get(f"/v1/entries/{task_hash}")).status_code == 404  # nothing planted
    own = await client.post("/v1/objects/batch", content=planted,
                            headers={**BATCH, "Origin": "http://cache.test"})
    assert own.json()["results"][0]["status"] == 201  # its own origin, its own type
    for form in ("", "csrf=0"):  # the dashboard's delete without the page's CSRF token
        delete = await client.post(f"/entries/{task_hash}/delete", content=form,
                                   headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert delete.status_code == 403
    delete = await client.post(f"/entries/{task_hash}/delete", headers={"Origin": FOREIGN})
    assert delete.status_code == 403
    assert (await client.get(f"/v1/entries/{task_hash}")).status_code == 200  # still there
    page = (await client.get(f"/entries/{task_hash}")).text
    csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', page).group(1)
    delete = await client.post(f"/entries/{task_hash}/delete", content=f"csrf={csrf}",
                               headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert delete.status_code == 303  # the page's own form works
    assert (await client.get(f"/v1/entries/{task_hash}")).status_code == 404


@pytest.mark.slow
def test_wrong_tokens_are_throttled_per_address(fresh_server) -> None:
    server = fresh_server(tokens=f"read:{READER},write:{WRITER}")

    def at(address: str) -> httpx.Client:  # loopback answers from any 127.x source
        return httpx.Client(transport=httpx.HTTPTransport(local_address=address),
                            base_url=server.url)

    with at("127.0.0.2") as guesser, at("127.0.0.3") as other, at("127.0.0.4") as login:
        for i in range(12):
            answer = guesser.get("/v1/stats", headers={"Authorization": f"Bearer g{i}"})
            assert answer.status_code == (401 if i < 10 else 429), i
        assert int(answer.headers["Retry-After"]) >= 1
        right = guesser.get("/v1/stats", headers={"Authorization": f"Bearer {READER}"})
        assert right.status_code == 429  # refused even when right: no oracle while blocked
        ok = other.get("/v1/stats", headers={"Authorization": f"Bearer {READER}"})
        assert ok.status_code == 200  # another address is not affected
        csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"',
                         login.get("/login").text).group(1)
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        tries = [login.post("/login", content=f"token=g{i}&csrf={csrf}", headers=form)
                 for i in range(11)]
        assert [t.status_code for t in tries] == [401] * 10 + [429]
