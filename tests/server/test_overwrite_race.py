"""An overwrite and a store that reuses the replaced object, interleaved (issue 29, row 6).

The overwrite used to delete the old object by the reference count its own index
transaction saw; a store of another hash with the same body, published between that
transaction and the deletion, lost its object: an entry without bytes.
"""

from __future__ import annotations

import pytest

from tests.server.conftest import MakeApp
from tests.server.wire import encode_pickle, new_hash


@pytest.mark.anyio
async def test_an_overwrite_keeps_an_object_reused_meanwhile(make_app: MakeApp) -> None:
    client = await make_app()
    removal = client._transport.app.state.cache.removal  # type: ignore[attr-defined]
    old, new = encode_pickle("old"), encode_pickle("new")
    first, second = new_hash(), new_hash()
    assert (await client.put(f"/v1/objects/{first}", content=old.body,
                             headers=old.headers())).status_code == 201
    forget = removal.forget_replaced

    async def store_between(*args: object) -> None:
        # Between the overwrite's index transaction and its removal of the old object:
        # another hash stores the same body (the existing object gains a reference).
        reused = await client.put(f"/v1/objects/{second}", content=old.body,
                                  headers=old.headers())
        assert reused.status_code == 201
        await forget(*args)

    removal.forget_replaced = store_between
    refreshed = await client.put(f"/v1/objects/{first}", params={"overwrite": "true"},
                                 content=new.body, headers=new.headers())
    assert refreshed.status_code == 201
    assert (await client.get(f"/v1/objects/{first}")).content == new.body
    kept = await client.get(f"/v1/objects/{second}")
    assert kept.status_code == 200 and kept.content == old.body
    assert (await client.get("/v1/stats")).json()["corrupt"] == 0
