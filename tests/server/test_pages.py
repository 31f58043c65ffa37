"""The server's web pages load nothing from other hosts: /docs and /redoc use the package's
vendored assets (cache_server/api/static/vendor/README.md), served without a token."""

from __future__ import annotations

import re

import pytest

from tests.server.conftest import MakeApp

pytestmark = pytest.mark.anyio

_URL = re.compile(r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|url\s*:\s*["']([^"']+)["']""")


def referenced(html: str) -> list[str]:
    """Every URL a page's tags and inline script name."""
    return [a or b for a, b in _URL.findall(html)]


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_api_docs_load_only_assets_this_server_serves(make_app: MakeApp, page: str):
    client = await make_app(tokens="read:reader-token")
    assert (await client.get(page)).status_code == 401  # same access as the API
    auth = {"Authorization": "Bearer reader-token"}
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




async def test_a_browser_signs_in_with_a_cookie_that_keeps_its_scope(make_app: MakeApp):
    client = await make_app(tokens="read:reader-token,write:writer-token")
    page = await client.get("/", headers={"Accept": "text/html"})
    assert page.status_code == 303 and page.headers["location"] == "/login"
    assert (await client.get("/")).status_code == 401  # not a browser: the API's answer
    assert (await client.get("/login")).status_code == 200
    refused = await client.post("/login", content=b"token=nope",
                                headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert refused.status_code == 401 and "result_cache_token" not in refused.headers.get(
        "set-cookie", "")
    signed = await client.post("/login", content=b"token=reader-token",
                               headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert signed.status_code == 303
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    client.cookies.set("result_cache_token", "reader-token")
    assert (await client.get("/", headers={"Accept": "text/html"})).status_code == 200
    assert (await client.get("/v1/stats")).status_code == 200  # the API takes the cookie
    pin = await client.post(f"/entries/{'0' * 32}/pin")
    assert pin.status_code == 403  # a read token cannot pin, from the page either
    client.cookies.set("result_cache_token", "writer-token")
    assert (await client.post(f"/entries/{'0' * 32}/pin")).status_code == 404
