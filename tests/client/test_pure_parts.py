"""The pure parts under a run, without any service: the batch format both sides speak
(client_lib/wire/batch.py), a run's byte bound (client_lib/policy/budget.py) and its
tally in one process and across a cluster's workers (client_lib/execution/tally.py), and
which results are handles (client_lib/hashing/handles.py)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from client_lib.execution import tally as tally_module
from client_lib.execution.tally import RunTally, Tallies
from client_lib.hashing.handles import is_handle
from client_lib.policy.budget import RunBudget
from client_lib.policy.decisions import Reason, StoreDecision
from client_lib.policy.modes import AutoPolicy, Candidate
from client_lib.wire import batch, bounds, codec


def _items() -> list[tuple[dict, bytes]]:
    return [({"hash": "a" * 32, "nbytes": 3}, b"abc"), ({"hash": "b" * 32, "nbytes": 0}, b""),
            ({"hash": "c" * 32, "nbytes": 5}, b"\x00\x01\x02\x03\x04")]


def test_a_batch_round_trips_item_by_item() -> None:
    assert batch.unpack(batch.pack(_items())) == _items()
    assert batch.unpack(b"") == []


@pytest.mark.parametrize(("mangle", "message"), [
    (lambda body: body[:-1], "ends inside an object"),
    (lambda body: body[:2], "ends inside an item's header length"),
    (lambda body: body[:10], "ends inside an item's header"),
    (lambda body: (10**6).to_bytes(4, "big") + body[4:], "header longer than"),
    (lambda body: (5).to_bytes(4, "big") + b"{oops" + body[9:], "unreadable batch item"),
])
def test_a_malformed_batch_is_refused_with_its_reason(mangle, message) -> None:
    with pytest.raises(batch.BatchFormatError, match=message):
        batch.unpack(mangle(batch.pack(_items())))


def test_a_batch_keeps_the_protocol_s_bounds() -> None:
    too_big = bounds.MAX_BATCH_OBJECT_BYTES + 1
    big = [({"nbytes": too_big}, b"x" * too_big)]
    with pytest.raises(batch.BatchFormatError, match="PUT larger ones"):
        batch.unpack(batch.pack(big))
    many = [({"nbytes": 0}, b"")] * (bounds.MAX_BATCH_ITEMS + 1)
    with pytest.raises(batch.BatchFormatError, match=f"more than {bounds.MAX_BATCH_ITEMS}"):
        batch.unpack(batch.pack(many))
    assert len(batch.unpack(batch.pack(many[:-1]))) == bounds.MAX_BATCH_ITEMS


def test_the_content_digest_starts_with_the_metadata_header() -> None:
    enc = codec.encode(b"some bytes")
    hasher = codec.content_hasher(enc.kind, enc.dtype, enc.shape)
    hasher.update(enc.body)
    assert enc.digest == hasher.hexdigest()
    assert codec.object_header("ndarray", "<f8", "[2]") == b"ndarray\n<f8\n[2]\n"


def _intermediate(nbytes: int = 10**7) -> Candidate:
    return Candidate("0" * 32, "f", 0.5, 0.0, nbytes, False)


def test_the_byte_bound_charges_what_it_admits_and_refuses_past_it() -> None:
    policy = AutoPolicy(latency=0.005, throughput=1e9, max_run_bytes=0.5, min_run_bytes=0)
    budget = RunBudget()
    budget.add_read(10**7)  # a loaded result: 10 MB read
    first = budget.decide(policy, _intermediate(), reads=True)  # an input: 20 MB read
    assert first.store and first.reason is Reason.PAYS
    assert (budget.read_bytes, budget.admitted_bytes) == (2 * 10**7, 10**7)
    second = budget.decide(policy, _intermediate())  # 10 MB allowed, 20 asked
    assert not second.store and second.reason is Reason.OVER_BUDGET
    assert budget.admitted_bytes == 10**7  # a refusal costs nothing
    budget.add_read(2 * 10**7)
    assert budget.decide(policy, _intermediate()).store  # 40 MB read: 20 MB fit


def test_a_tally_counts_decisions_by_reason_and_keeps_large_ones() -> None:
    tally = RunTally()
    assert tally.empty
    tally.decided("small", 10, StoreDecision(False, Reason.OVER_BUDGET, "whatever words"))
    tally.decided("big", 2**21, StoreDecision(True, Reason.PAYS, "it pays"))
    tally.stored_one("h" * 32, 2**21, "big")
    tally.outcome("big", 2**21, Reason.DROPPED)
    assert (tally.over_budget, tally.stored, tally.stored_bytes) == (1, 1, 2**21)
    assert tally.decisions == ["big (2.0 MiB): stored: it pays"]
    assert tally.functions == {"small": {"over byte bound": [1, 10]},
                               "big": {"stored": [1, 2**21], "buffer full": [1, 2**21]}}
    assert tally.dropped == 1
    assert not tally.empty


def test_a_cluster_s_tallies_travel_and_add_up() -> None:
    one, two = RunTally(), RunTally()
    one.stored_one("a" * 32, 10)
    one.budget.add_read(15)
    two.stored_one("b" * 32, 20, "f")
    two.waited_and_loaded()
    two.lose("server gone")
    two.budget.add_read(5)
    two.budget.admitted_bytes = 25
    two.store_seconds = 0.25
    total = RunTally()
    for worker in (one, two):
        total.merge(pickle.loads(pickle.dumps(worker)))  # as client.run returns it
    assert (total.stored, total.stored_bytes, total.waited_loaded) == (2, 30, 1)
    assert total.stored_hashes == {"a" * 32, "b" * 32} and total.lost == "server gone"
    assert (total.budget.read_bytes, total.budget.admitted_bytes) == (20, 25)
    assert total.store_seconds == pytest.approx(0.25)
    assert total.functions == {"": {"stored": [1, 10]}, "f": {"stored": [1, 20]}}


def test_a_process_forgets_the_oldest_run_s_tally_first(monkeypatch) -> None:
    monkeypatch.setattr(tally_module, "_RUNS_KEPT", 3)
    tallies = Tallies()
    for run in "abcd":
        tallies.of(run).stored_one(run * 32, 1)
    assert tallies.take("a").empty  # forgotten: a run that never asked for it
    assert tallies.take("d").stored == 1
    assert tallies.take("d").empty  # taken once


def test_handles_are_known_by_type_once_and_containers_are_looked_into_each_time(
        tmp_path) -> None:
    # The answer for a type is kept (every result of a run is asked): it must not leak
    # into containers, whose items differ from one value to the next.
    class Connection:  # DB-API 2.0
        def cursor(self): ...
        def commit(self): ...
        def close(self): ...

    for _ in range(2):
        assert not is_handle(np.ones(3)) and not is_handle([1, 2]) and not is_handle({})
        assert is_handle([1, (x for x in ())]) and is_handle({"db": Connection()})
        assert is_handle(Connection())
        with open(tmp_path / "f", "w") as f:
            assert is_handle(f) and is_handle((f,))
