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


