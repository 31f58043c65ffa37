"""A page on another port of 127.0.0.1, opened in a real browser (Debian's chromium, driven
by playwright), attacks the cache server the way issue 29 rows 2 and 3 say: a form POST
deletes an entry from the dashboard, and ``fetch(no-cors)`` with a ``text/plain`` (or
untyped) body plants a pickle through ``POST /v1/objects/batch``. Against a tokenless
server (the loopback default) and against a server whose dashboard the browser is signed
in to with a write token: the entry is still there and nothing was planted."""

from __future__ import annotations

import base64
import http.server
import uuid
from collections.abc import Iterator

import httpx
import pytest

from client_lib.wire import batch
from tests._servers import http_server_thread
from tests.server.wire import encode_pickle, new_hash

pytestmark = pytest.mark.slow

WRITE = "w-" + uuid.uuid4().hex + uuid.uuid4().hex
ATTACK = """<!doctype html><html><body>
<form id="f" method="post" action="{target}/entries/{victim}/delete">
<input type="hidden" name="csrf" value="0"></form><script>
const bytes = Uint8Array.from(atob("{planted}"), c => c.charCodeAt(0));
Promise.allSettled([
  fetch("{target}/v1/objects/batch", {{method: "POST", mode: "no-cors", credentials: "include",
        body: new Blob([bytes], {{type: "text/plain"}})}}),
  fetch("{target}/v1/objects/batch", {{method: "POST", mode: "no-cors", credentials: "include",
        body: new Blob([bytes])}}),
  fetch("{target}/entries/{victim}/unpin", {{method: "POST", mode: "no-cors",
        credentials: "include"}}),
]).then(() => {{ document.title = "sent"; document.getElementById("f").submit(); }});
</script></body></html>"""


def attacker_site(html: str) -> Iterator[str]:
    """An HTTP server on another port of 127.0.0.1 that serves ``html`` at ``/``."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with http_server_thread(Page) as url:
        yield f"{url}/"


def store(url: str, headers: dict[str, str]) -> str:
    encoded = encode_pickle({"victim": True})
    task_hash = new_hash()
    meta = {"hash": task_hash, "kind": "pickle", "digest": encoded.digest,
            "compute_seconds": 1.0, "label": "victim", "nbytes": len(encoded.body)}
    answer = httpx.post(f"{url}/v1/objects/batch", content=batch.pack([(meta, encoded.body)]),
                        headers={"Content-Type": batch.MEDIA_TYPE, **headers})
    assert answer.json()["results"][0]["status"] == 201
    pinned = httpx.post(f"{url}/v1/entries/{task_hash}/pin", headers=headers)
    assert pinned.status_code == 200
    return task_hash


@pytest.mark.parametrize("tokens", [False, True], ids=["tokenless", "signed-in"])
def test_a_page_of_another_port_deletes_and_plants_nothing(tmp_path, redis_url, browser,
                                                           tokens):
    from cache_server.launch import start_server

    env = {"RESULT_CACHE_TOKENS": f"write:{WRITE}"} if tokens else {}
    auth = {"Authorization": f"Bearer {WRITE}"} if tokens else {}
    with start_server(tmp_path / "data", redis_url=redis_url, env=env,
                      redis_prefix=f"xs-{uuid.uuid4().hex[:8]}:") as server:
        victim = store(server.url, auth)
        encoded = encode_pickle("planted")
        planted_hash = new_hash()
        meta = {"hash": planted_hash, "kind": "pickle", "digest": encoded.digest,
                "compute_seconds": 1.0, "label": "planted", "nbytes": len(encoded.body)}
        planted = base64.b64encode(batch.pack([(meta, encoded.body)])).decode()
        context = browser.new_context()
        page = context.new_page()
        if tokens:  # the victim's browser holds a write session for the dashboard
            page.goto(f"{server.url}/login")
            page.fill("#token", WRITE)
            page.click("button[type=submit]")
            page.wait_for_url(f"{server.url}/")
            assert any(c["name"] == "result_cache_session" for c in context.cookies())
        for site in attacker_site(ATTACK.format(target=server.url, victim=victim,
                                                planted=planted)):
            page.goto(site)
            page.wait_for_url(f"{server.url}/entries/{victim}/delete")  # the form was sent
            assert "another origin" in page.content()
        context.close()
        entry = httpx.get(f"{server.url}/v1/entries/{victim}", headers=auth)
        assert entry.status_code == 200 and entry.json()["pinned"] is True  # untouched
        assert httpx.get(f"{server.url}/v1/entries/{planted_hash}",
                         headers=auth).status_code == 404  # nothing planted
