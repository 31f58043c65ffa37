"""The HTTP API (docs/protocol.md): FastAPI routes over the service, nothing more.

- :mod:`.app`: :func:`~.app.create_app`, the app and its lifespan.
- :mod:`.routers`: one router per resource (lookup, objects, entries, stats, health).
- :mod:`.dependencies`: what routes receive (the service, settings, metrics, a task hash).
- :mod:`.auth`: bearer tokens with a read and a write scope.
- :mod:`.errors`: the one table from error class to HTTP status.
- :mod:`.responses`: the error statuses each route declares in the OpenAPI schema.
- :mod:`.middleware`: the JSON body limit and the request metrics (pure ASGI).
"""

from cache_server.api.app import create_app

__all__ = ["create_app"]
