"""The server's web pages load nothing from other hosts: /docs and /redoc use the package's
vendored assets (cache_server/api/static/vendor/README.md), served without a token."""

from __future__ import annotations

import re

import pytest

from tests.server.conftest import MakeApp

pytestmark = pytest.mark.anyio

READER, WRITER = "reader-" + "r" * 32, "writer-" + "w" * 32
FORM = {"Content-Type": "application/x-www-form-urlencoded"}

_URL = re.compile(r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|url\s*:\s*["']([^"']+)["']""")


def referenced(html: str) -> list[str]:
    """Every URL a page's tags and inline script name."""
    return [a or b for a, b in _URL.findall(html)]


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_api_docs_load_only_assets_this_server_serves(make_app: MakeApp, page: str):
    client = await make_app(tokens=f"read:{READER}")
    assert (await client.get(page)).status_code == 401  # same access as the API
    auth = {"Authorization": f"Bearer {READER}"}
    html = (await client.get(page, headers=auth)).text
    urls = referenced(html)
    assert "/openapi.json" in urls and any(u.endswith(".js") for u in urls)
    assert not [u for u in urls if "//" in u], urls  # no CDN, no other host
    assert "fonts.googleapis" not in html
    for url in urls:
        response = await client.get(url, headers=auth if url == "/openapi.json" else None)
        assert response.status_code == 200, url  # assets need no token: code, not data
        assert len(response.content) > 100


async def test_vendored_scripts_name_no_other_host(make_app: MakeApp):
    client = await make_app()
    redoc = (await client.get("/static/vendor/redoc/redoc.standalone.js")).text
    assert "cdn.redoc.ly" not in redoc and "fonts.googleapis" not in redoc
    response = await client.get("/static/vendor/swagger-ui/swagger-ui.css")
    assert response.headers["content-type"].startswith("text/css")
    assert (await client.get("/static/../app.py")).status_code == 404




async def test_a_browser_signs_in_with_a_session_that_keeps_its_scope(make_app: MakeApp):
    client = await make_app(tokens=f"read:{READER},write:{WRITER}")
    page = await client.get("/", headers={"Accept": "text/html"})
    assert page.status_code == 303 and page.headers["location"] == "/login"
    assert (await client.get("/")).status_code == 401  # not a browser: the API's answer
    form = await client.get("/login")
    csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', form.text).group(1)
    refused = await client.post("/login", content=f"token=nope&csrf={csrf}", headers=FORM)
    assert refused.status_code == 401 and "set-cookie" not in refused.headers
    forged = await client.post("/login", content=f"token={READER}&csrf=0", headers=FORM)
    assert forged.status_code == 403 and "set-cookie" not in forged.headers  # no CSRF token
    signed = await client.post("/login", content=f"token={READER}&csrf={csrf}", headers=FORM)
    assert signed.status_code == 303
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert READER not in cookie  # an opaque session id, never the token
    assert (await client.get("/", headers={"Accept": "text/html"})).status_code == 200
    assert (await client.get("/totals")).json()["entries"] >= 0
    assert (await client.get("/v1/stats")).status_code == 401  # the API never takes it
    pin = await client.post(f"/entries/{'0' * 32}/pin")
    assert pin.status_code == 403  # a read session cannot pin, from the page either
    client.cookies.clear()
    assert (await client.get("/totals")).status_code == 401
    client.cookies.set("result_cache_session", "guessed")
    assert (await client.get("/totals")).status_code == 401
    client.cookies.set("result_cache_token", READER)  # the old cookie: the token itself
    assert (await client.get("/totals")).status_code == 401
    client.cookies.clear()
    signed = await client.post("/login", content=f"token={WRITER}&csrf={csrf}", headers=FORM)
    entry = await client.get(f"/entries/{'0' * 32}")
    assert entry.status_code == 404
    no_csrf = await client.post(f"/entries/{'0' * 32}/pin")
    assert no_csrf.status_code == 403 and "CSRF" in no_csrf.json()["detail"]
    wrong = await client.post(f"/entries/{'0' * 32}/pin", content=f"csrf={csrf}", headers=FORM)
    assert wrong.status_code == 403  # the login form's token is not this session's
