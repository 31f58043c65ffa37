"""One APIRouter per resource; each route calls the service (:mod:`cache_server.service`)."""

__all__: list[str] = []
