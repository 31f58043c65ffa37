"""Fault test 7: fuzz the HTTP API with schemathesis against the app's own OpenAPI schema.

No 5xx, every status declared, every response matching its schema and content type. Kept
small here (``RC_FUZZ_EXAMPLES`` examples per operation, default 12); the campaign
``python -m tests.stress.fuzz --examples 500`` runs the same test with more.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from cache_server.launch import RunningServer, start_server

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("RC_FUZZ_EXAMPLES", "12"))
#: Where a campaign wants the number of requests made (``tests.stress.fuzz``).
COUNT_FILE = os.environ.get("RC_FUZZ_COUNT_FILE")


def _schemathesis():
    """schemathesis and the checks we run. Imported when the test runs, not when it is
    collected: the import costs every run of the suite about a second (and its pytest
    plugin, which this test does not use, is off: pyproject.toml)."""
    import schemathesis
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    # The batch route's framed body is opaque bytes to the schema (format: binary), like
    # application/octet-stream: fuzz it with random bytes.
    schemathesis.serializer.alias("application/x-result-batch", "application/octet-stream")
    return schemathesis, [not_a_server_error, status_code_conformance,
                          content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory, redis_url: str
                ) -> Iterator[RunningServer]:
    # A small max_body_bytes and cap, so that 413 and 507 are reachable too.
    env = {"RESULT_CACHE_MAX_BODY_BYTES": "100000", "RESULT_CACHE_MAX_BYTES": "50000",
           "RESULT_CACHE_MAX_LOOKUP_HASHES": "50"}
    with start_server(tmp_path_factory.mktemp("fuzz"), redis_url=redis_url,
                      redis_prefix="fuzz:", env=env) as server:
        yield server


def test_api_answers_every_input_within_its_schema(fuzz_server: RunningServer) -> None:
    schemathesis, checks = _schemathesis()
    schema = schemathesis.openapi.from_url(f"{fuzz_server.url}/openapi.json")
    requests = 0
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def fuzz(case) -> None:
            nonlocal requests
            requests += 1
            case.call_and_validate(base_url=fuzz_server.url, checks=checks, timeout=30)

        fuzz()
    assert requests >= len(operations)
    if COUNT_FILE:
        Path(COUNT_FILE).write_text(json.dumps({"operations": len(operations),
                                                "requests": requests}))
