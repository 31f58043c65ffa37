"""``python -m cache_server`` is ``dask-cache``."""

from cache_server.cli import main

main()
