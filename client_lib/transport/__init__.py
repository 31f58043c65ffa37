"""The HTTP side of docs/protocol.md: :class:`~.client.CacheClient` and what it is made of.
No Dask: it runs wherever a load or store does."""
