"""The dashboard: server-rendered pages (Jinja2) over the same service as the API
(docs/design/dashboard-and-runs.md, "The dashboard").

``/`` totals, a plot of lookups and seconds saved over time, live events (server-sent
events from ``/events/stream``) and the recent runs; ``/runs/{id}`` a run's counts, its
progress while it runs and its task graph coloured by what the cache did; ``/entries``
the entries, paged by cursor (never silently capped); ``/entries/{hash}`` one entry, with
pin, unpin and delete for a write token. A browser signs in at ``/login`` and gets a
session (:mod:`cache_server.api.sessions`): an opaque id in an HttpOnly, SameSite=Strict
cookie that these routes accept, the API never; every form carries the session's CSRF
token. ``/totals`` and ``/runs/{id}/summary`` are the JSON the pages' scripts refresh
from. Every asset is served by the package (``/static``).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from fastapi.templating import Jinja2Templates

from cache_server.api.auth import (
    SESSION_COOKIE,
    ReadAccess,
    WriteAccess,
    failed_attempt,
    throttled,
)
from cache_server.api.dependencies import CacheDep, TaskHash
from cache_server.api.errors import Forbidden, answer_error
from cache_server.api.routers.runs import RunId
from cache_server.api.sessions import Sessions
from cache_server.models import Event, RunSummary, Stats
from cache_server.service.errors import Busy, IndexUnavailable
from cache_server.service.upload import MAX_LABEL_CHARS
from storage.header import DIGEST_PATTERN

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=FilePath(__file__).parents[1] / "templates")

#: Events the plot and the page's list start from; streams open at once; a stream's life.
_PLOT_EVENTS = 2000
_PLOT_BUCKETS = 40
_MAX_STREAMS = 32
_STREAM_SECONDS = 300.0
_STREAM_BLOCK_MS = 2000
_streams = 0
_MAX_FORM = 4096


def _sessions(request: Request) -> Sessions:
    return request.app.state.sessions


def _session_id(request: Request) -> str | None:
    """The session the CSRF token belongs to (None without tokens: no sessions then)."""
    return request.cookies.get(SESSION_COOKIE) if request.app.state.tokens.enabled else None


async def _csrf(request: Request) -> str:
    return await _sessions(request).csrf_token(_session_id(request))


async def _login_page(request: Request, error: str | None, status_code: int = 200
                      ) -> HTMLResponse:
    return templates.TemplateResponse(
        request, "login.html",
        {"error": error, "csrf": await _sessions(request).csrf_token(None)},
        status_code=status_code)


@router.get("/login")
async def login_form(request: Request, error: str | None = None) -> HTMLResponse:
    return await _login_page(request, error)


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the token (read scope at least) and open a session for it; wrong tokens are
    throttled per client address like wrong bearer tokens."""
    form = await _form(request)
    if not await _sessions(request).csrf_ok(None, form.get("csrf")):
        return await _login_page(request, "the form expired: sign in again", 403)
    too_many = throttled(request)
    if too_many is not None:
        return await answer_error(request, too_many)
    table = request.app.state.tokens
    token = form.get("token")
    scope = table.scope_of(token) if token else None
    if not table.enabled:
        return RedirectResponse("/", status_code=303)  # nothing to sign in to
    if scope is None:
        failed_attempt(request)
        return await _login_page(request, "that token is not valid here", 401)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(SESSION_COOKIE, await _sessions(request).open(scope),
                        max_age=int(request.app.state.settings.session_seconds),
                        httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
    return response


@router.get("/", dependencies=[ReadAccess])
async def index(request: Request, cache: CacheDep) -> HTMLResponse:
    stats = await cache.stats()
    events = await cache.events_with_ids(_PLOT_EVENTS)
    runs = await cache.recent_runs(20)
    return templates.TemplateResponse(request, "index.html", {
        "stats": stats, "runs": runs, "events": [e for _, e in events[:50]],
        "last_event": events[0][0] if events else "0",
        "plot": _plot([e for _, e in events]),
    })


@router.get("/runs/{run_id}", dependencies=[ReadAccess])
async def run_page(request: Request, run_id: RunId, cache: CacheDep) -> HTMLResponse:
    run = await cache.run(run_id)
    return templates.TemplateResponse(request, "run.html", {
        "run": run, "tasks": [t.model_dump() for t in run.task_list]})


@router.get("/entries", dependencies=[ReadAccess])
async def entries_page(
    request: Request,
    cache: CacheDep,
    label: Annotated[str | None, Query(max_length=MAX_LABEL_CHARS)] = None,
    cursor: Annotated[str | None, Query(pattern=DIGEST_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> HTMLResponse:
    entries, next_cursor = await cache.entries(label=label or None, limit=limit, cursor=cursor)
    return templates.TemplateResponse(request, "entries.html", {
        "entries": entries, "label": label or "", "next_cursor": next_cursor, "limit": limit,
        "now": time.time()})


@router.get("/entries/{task_hash}", dependencies=[ReadAccess])
async def entry_page(request: Request, task_hash: TaskHash, cache: CacheDep) -> HTMLResponse:
    manifest = await cache.manifest(task_hash)
    return templates.TemplateResponse(request, "entry.html",
                                      {"entry": manifest, "csrf": await _csrf(request)})


@router.get("/totals", dependencies=[ReadAccess])
async def totals(cache: CacheDep) -> Stats:
    """``GET /v1/stats`` for the index page's script (the API takes no session)."""
    return await cache.stats()


@router.get("/runs/{run_id}/summary", dependencies=[ReadAccess])
async def run_summary(run_id: RunId, cache: CacheDep) -> RunSummary:
    """``GET /v1/runs/{id}`` for the run page's script."""
    return await cache.run(run_id)


@router.post("/entries/{task_hash}/{action}", dependencies=[WriteAccess])
async def entry_action(request: Request, task_hash: TaskHash, action: str,
                       cache: CacheDep) -> Response:
    """Pin, unpin or delete; a form's post must carry its CSRF token (a request with a
    bearer token needs none: no browser adds one on its own)."""
    if "authorization" not in request.headers and not await _sessions(request).csrf_ok(
            _session_id(request), (await _form(request)).get("csrf")):
        raise Forbidden("the form's CSRF token is missing or wrong: reload the page")
    if action == "delete":
        await cache.delete(task_hash)
        return RedirectResponse("/entries", status_code=303)
    if action not in ("pin", "unpin"):
        return Response("unknown action", status_code=404)
    await cache.set_pinned(task_hash, action == "pin")
    return RedirectResponse(f"/entries/{task_hash}", status_code=303)


@router.get("/events/stream", dependencies=[ReadAccess])
async def event_stream(request: Request, cache: CacheDep,
                       after: Annotated[str, Query(pattern=r"^\d+(-\d+)?$")] = "$"
                       ) -> StreamingResponse:
    """New events as server-sent events, for at most five minutes (the browser's
    EventSource reconnects, sending the last id it saw)."""
    global _streams
    if _streams >= _MAX_STREAMS:
        raise Busy(f"{_MAX_STREAMS} event streams are open; try again later", 5)
    last = request.headers.get("last-event-id") or after
    _streams += 1

    async def stream() -> AsyncIterator[bytes]:
        global _streams
        nonlocal last
        deadline = time.monotonic() + _STREAM_SECONDS
        try:
            yield b"retry: 2000\n\n"
            while time.monotonic() < deadline and not await request.is_disconnected():
                try:
                    found = await cache.events_after(last, 100, _STREAM_BLOCK_MS)
                except IndexUnavailable:
                    await asyncio.sleep(1.0)
                    continue
                if not found:
                    yield b": idle\n\n"
                for event_id, event in found:
                    last = event_id
                    data = event.model_dump_json(exclude_none=True)
                    yield f"id: {event_id}\ndata: {data}\n\n".encode()
        finally:
            _streams -= 1

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store"})


async def _form(request: Request) -> dict[str, str]:
    """The fields of a small urlencoded form, first value of each (at most ``_MAX_FORM``
    bytes are read; a larger form is empty)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_FORM:
            return {}
    fields = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
    return {name: values[0] for name, values in fields.items()}


def _plot(events: list[Event]) -> dict[str, Any]:
    """Lookups found and missed, and seconds saved, per time bucket: the SVG polylines of
    the page's plot (0..100 wide, 0..40 high) and the totals they show."""
    if not events:
        return {"found": "", "missing": "", "saved": "", "start": None, "end": None,
                "max": 0, "max_saved": 0.0}
    start, end = events[-1].time, max(events[0].time, events[-1].time + 1)
    width = (end - start) / _PLOT_BUCKETS
    found = [0] * _PLOT_BUCKETS
    missing = [0] * _PLOT_BUCKETS
    saved = [0.0] * _PLOT_BUCKETS
    for e in events:
        b = min(int((e.time - start) / width), _PLOT_BUCKETS - 1)
        if e.kind == "lookup":
            found[b] += e.found or 0
            missing[b] += e.missing or 0
        elif e.kind == "hit":
            saved[b] += e.seconds or 0.0
    top = max(max(found), max(missing), 1)
    top_saved = max(max(saved), 1e-9)

    def line(values: list[float], scale: float) -> str:
        step = 100 / (_PLOT_BUCKETS - 1)
        return " ".join(f"{i * step:.1f},{40 - 38 * v / scale:.1f}"
                        for i, v in enumerate(values))

    return {"found": line(found, top), "missing": line(missing, top),
            "saved": line(saved, top_saved), "start": start, "end": end, "max": top,
            "max_saved": max(saved), "data": json.dumps({"found": found, "missing": missing,
                                                         "saved": saved})}
