"""Prometheus metrics of one app (its own registry, so several apps can share a process).

The service counts lookups, hits, stores and bytes; the API's ``MetricsMiddleware``
(:mod:`cache_server.api.middleware`) counts HTTP requests into the same registry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["Metrics"]


class Metrics:
    """Counters of this server process (Redis holds the cluster-wide totals in /v1/stats)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "result_cache_http_requests",
            "HTTP requests by method, route template and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "result_cache_http_request_duration_seconds",
            "time to answer a request (until the response is complete)",
            ["method", "route"],
            registry=self.registry,
        )
        self.lookups = Counter(
            "result_cache_lookups", "hashes asked in lookups", registry=self.registry
        )
        self.misses = Counter(
            "result_cache_misses", "hashes looked up and not found", registry=self.registry
        )
        self.hits = Counter(
            "result_cache_hits", "hashes looked up and found", registry=self.registry
        )
        self.served = Counter("result_cache_served", "objects served", registry=self.registry)
        self.located = Counter(
            "result_cache_located", "objects located for direct reads", registry=self.registry
        )
        self.stores = Counter("result_cache_stores", "entries stored", registry=self.registry)
        self.corrupt = Counter(
            "result_cache_corrupt", "entries dropped as missing or corrupt", registry=self.registry
        )
        self.untrusted = Counter(
            "result_cache_untrusted",
            "loads clients refused for a missing or wrong signature",
            registry=self.registry,
        )
        self.evictions = Counter(
            "result_cache_evictions", "entries evicted for max_bytes", registry=self.registry
        )
        self.bytes_received = Counter(
            "result_cache_received_bytes", "object body bytes received", registry=self.registry
        )
        self.uploads_refused = Counter(
            "result_cache_uploads_refused",
            "uploads answered 503 because max_uploads were in flight",
            registry=self.registry,
        )
        self.bytes_sent = Counter(
            "result_cache_sent_bytes", "object body bytes served", registry=self.registry
        )
