"""The run's logic against an in-memory cache (tests/client/_fake_cache.py, behind
client_lib's own transport interface): no Redis, no server. What a run does with hits,
misses, failed lookups, entries that fail to load and a server lost during the run; store
decisions counted by their reason (data, not text); leases chosen for the tasks worth it.
The same behaviours against a real server are in test_cached_compute.py,
test_honest_reports.py, test_leases.py and test_store_budget.py."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import dask
import numpy as np
import pytest

from client_lib import CacheAccessDenied, CacheUnavailable, cached_compute, last_report
from client_lib.execution.leases import take_leases
from client_lib.execution.specs import StoreRun, StoreSpec
from client_lib.plan.hashed import hash_collections
from client_lib.plan.rewrite import rewrite
from client_lib.policy import costs
from client_lib.policy.decisions import Reason, StoreDecision
from client_lib.policy.modes import AutoPolicy, Candidate, resolve_policy
from client_lib.wire import codec
from tests.client._fake_cache import FakeCache


def _inc(x: int) -> int:
    return x + 1


def _chain(n: int = 3, start: int = 0):
    value = dask.delayed(start)
    for i in range(n):
        value = dask.delayed(_inc, pure=True)(value, dask_key_name=f"step-{i}")
    return value


def test_a_cold_run_stores_and_a_warm_run_loads() -> None:
    cache, ns = FakeCache(), uuid.uuid4().hex
    assert cached_compute(_chain(), cache=cache, namespace=ns, policy="all",
                          scheduler="sync") == (3,)
    cold = last_report()
    assert (cold.computed, cold.loaded, cold.stored) == (3, 0, 3)
    assert len(cache.objects) == 3 and cache.calls["lookup"] == 1
    assert cached_compute(_chain(), cache=cache, namespace=ns, scheduler="threads") == (3,)
    warm = last_report()
    assert (warm.loaded, warm.computed, warm.hits) == (1, 0, 3) and warm.culled >= 2
    assert warm.fallback is None and cache.calls["lookup"] == 2


@pytest.mark.parametrize(("error", "said"), [
    (CacheUnavailable("connection refused"), "cache server unreachable"),
    (CacheAccessDenied(401, "no token", "set a token"), "cache server refused access"),
])
def test_a_failed_lookup_computes_without_the_cache(error: Exception, said: str) -> None:
    cache = FakeCache(f"memory://{uuid.uuid4().hex}")
    cache.failing["lookup"] = error
    with pytest.warns(RuntimeWarning, match="computing without the cache"):
        assert cached_compute(_chain(), cache=cache, policy="all", scheduler="sync") == (3,)
    report = last_report()
    assert report.fallback.startswith(said)
    assert (report.computed, report.loaded, report.stored) == (3, 0, 0)
    assert cache.calls["put"] + cache.calls["put_many"] == 0 and not cache.objects


def test_a_server_lost_during_the_run_reruns_once_without_the_cache() -> None:
    cache, ns = FakeCache(f"memory://{uuid.uuid4().hex}"), uuid.uuid4().hex
    cached_compute(_chain(), cache=cache, namespace=ns, policy="all", scheduler="sync")
    cache.lose_after = 0  # found by the lookup, then gone
    later = dask.delayed(_inc, pure=True)(_chain(), dask_key_name="later")
    with pytest.warns(RuntimeWarning, match="computing the rest of the run without"):
        assert cached_compute(later, cache=cache, namespace=ns, policy="all",
                              scheduler="sync") == (4,)
    report = last_report()
    assert "lost during the run" in report.fallback
    assert (report.loaded, report.computed, report.stored) == (0, 4, 0)
    assert cache.calls["get"] == 1  # one failure is enough: no retry per entry
    assert len(cache.objects) == 3  # nothing stored by the rerun


def test_an_entry_that_fails_to_load_is_recomputed_and_named() -> None:
    cache, ns = FakeCache(), uuid.uuid4().hex
    cached_compute(_chain(), cache=cache, namespace=ns, policy="all", scheduler="sync")
    hashed = hash_collections([_chain()], namespace=ns, signing_key=None)
    output = hashed.hashes.hashes[hashed.m.keys[0]]
    cache.objects[output] = codec.Encoded("pickle", "", "", "int", memoryview(b"garbage"),
                                          "0" * 32)  # the codec cannot read it back
    assert cached_compute(_chain(), cache=cache, namespace=ns, scheduler="sync") == (3,)
    report = last_report()
    assert report.retried == [output]
    assert report.loaded == 1 and report.computed == 1  # the step before it loads instead


@dataclass(frozen=True)
class _NeverFits(AutoPolicy):
    """``auto``'s byte bound, with every weighed result over it, said in words the run
    cannot recognise: the tally must count the decision's reason, not parse its text."""

    def may_store(self, cost_seconds: float, is_output: bool) -> bool:
        return True

    def decide(self, c: Candidate) -> StoreDecision:
        return StoreDecision(False, Reason.OVER_BUDGET, "no room in this run")


def test_store_decisions_are_counted_by_their_reason() -> None:
    cache = FakeCache()
    big = dask.delayed(np.ones, pure=True)(2**18, dask_key_name="big")  # 2 MiB: large
    total = dask.delayed(np.sum, pure=True)(big, dask_key_name="total")
    cached_compute(total, big, cache=cache, namespace=uuid.uuid4().hex, policy=_NeverFits(),
                   scheduler="threads")
    report = last_report()
    assert (report.stored, report.over_budget) == (0, 2)
    assert report.store_decisions == ["ones (2.0 MiB): not stored: no room in this run"]
    assert not cache.objects


def test_a_large_result_s_decision_is_listed_with_its_numbers() -> None:
    cache = FakeCache()
    big = dask.delayed(np.ones, pure=True)(2**18, dask_key_name="big")
    cached_compute(big, cache=cache, namespace=uuid.uuid4().hex, policy="all",
                   scheduler="sync")
    assert last_report().store_decisions == [
        "ones (2.0 MiB): stored: policy AllPolicy says store"]
    assert last_report().stored_bytes == 2**21


# -- the rewrite and leases, without running anything -----------------------------------

def test_a_hit_becomes_a_load_and_its_upstream_is_culled() -> None:
    ns = uuid.uuid4().hex
    hashed = hash_collections([_chain(4)], namespace=ns, signing_key=None)
    cacheable = hashed.cacheable()
    by_name = {str(k): h for k, h in cacheable.items()}
    run = StoreRun(FakeCache(), resolve_policy("all"), uuid.uuid4().hex)
    rewritten = rewrite(hashed.m, hashed.order, hashed.hashes, cacheable,
                        {by_name["step-1"]}, run)
    assert rewritten.loaded_keys == ["step-1"]
    assert sorted(map(str, rewritten.computed_keys)) == ["step-2", "step-3"]
    assert rewritten.culled == len(hashed.order) - 3  # step-0 and the literal
    assert {s.task_hash for s in rewritten.specs.values()} == {by_name["step-2"],
                                                               by_name["step-3"]}
    assert rewritten.specs[hashed.m.keys[0]].dep_hashes == (by_name["step-2"],)


def _specs(run: StoreRun, *labels: str) -> list[StoreSpec]:
    return [StoreSpec(run, uuid.uuid4().hex, label, False, ()) for label in labels]


def test_leases_are_held_waited_for_or_not_taken() -> None:
    cache = FakeCache()
    run = StoreRun(cache, resolve_policy("all"), uuid.uuid4().hex)
    mine, theirs, stored = _specs(run, "a", "b", "c")
    cache.leases[theirs.task_hash] = "another-run"
    cache.objects[stored.task_hash] = codec.encode(1)  # stored since the lookup
    granted = take_leases(run, [mine, theirs, stored])
    assert granted == {mine.task_hash}
    assert (mine.lease, theirs.lease, stored.lease) == ("held", "wait", "wait")
    refreshed = _specs(run, "d")[0]
    cache.objects[refreshed.task_hash] = codec.encode(2)
    take_leases(run, [refreshed], found={refreshed.task_hash})  # we recompute it anyway
    assert refreshed.lease is None


def test_cheap_tasks_and_wide_graphs_take_no_leases() -> None:
    cache = FakeCache()
    run = StoreRun(cache, resolve_policy("all"), uuid.uuid4().hex)
    label = f"cheap-{uuid.uuid4().hex}"
    costs.record_seconds(label, 0.0001)  # cheaper than one load's latency
    (cheap,) = _specs(run, label)
    assert take_leases(run, [cheap]) == set() and cache.calls["acquire_leases"] == 0
    with dask.config.set({"result-cache.lease-limit": 2}):
        assert take_leases(run, _specs(run, "x", "y", "z")) == set()
    assert cache.calls["acquire_leases"] == 0


def test_a_run_summary_too_large_for_the_server_sends_counts_by_label() -> None:
    from client_lib.plan.report import CacheReport
    from client_lib.plan.runs import run_summary
    from client_lib.wire.bounds import MAX_RUN_BYTES

    report = CacheReport()
    small = {f"k{i}": ("computed", None) for i in range(100)}
    assert len(run_summary(report, uuid.uuid4().hex, 1.0, "done", states=small)[
        "task_list"]) == 100
    # 1500 tasks with 1 KiB keys and reasons: ~3 MiB of task list, more than the server
    # keeps by default (its max_run_bytes is 4 MiB as stored, with defaults written out).
    large = {f"{i:05d}" + "k" * 1000: ("volatile", "r" * 1000) for i in range(1500)}
    body = run_summary(report, uuid.uuid4().hex, 1.0, "done", states=large,
                       labels=dict.fromkeys(large, "step"))
    assert "task_list" not in body and body["by_label"] == {"step": {"volatile": 1500}}
    assert len(str(body)) < MAX_RUN_BYTES


def _nap(i: int) -> int:
    import time

    time.sleep(0.005)
    return i


def test_small_results_finished_close_together_share_a_store_request() -> None:
    # Each stored batch costs the server a group commit and an index transaction: results
    # that finish within the writer's linger go in one request, and the run's end does not
    # wait the linger out.
    cache = FakeCache()
    parts = [dask.delayed(_nap, pure=True)(i, dask_key_name=f"nap-{i}") for i in range(12)]
    total = dask.delayed(sum, pure=True)(parts, dask_key_name="total")
    assert cached_compute(total, cache=cache, namespace=uuid.uuid4().hex, policy="all",
                          scheduler="threads") == (66,)
    assert last_report().stored == 13 and len(cache.objects) == 13
    assert cache.calls["put_many"] <= 3, cache.calls


def test_recipes_are_made_for_the_stored_results_and_the_tasks_recorded_before() -> None:
    # The server keeps only the recipes of entries it holds: a 200-task run that stores
    # its output made and sent 201 recipes (~20 µs of CPU each) for one to be kept.
    from client_lib.plan.runs import flush_posts

    cache, ns = FakeCache(), uuid.uuid4().hex
    parts = [dask.delayed(_inc, pure=True)(i) for i in range(200)]
    total = dask.delayed(sum, pure=True)(parts)
    with dask.config.set({"result-cache.report-runs": True}):
        assert cached_compute(total, cache=cache, namespace=ns, scheduler="threads") == (
            sum(range(1, 201)),)
        cold = last_report()
        assert flush_posts()
        assert cache.recipes_sent == [list(cold_stored := set(cache.objects))]
        assert cold.stored == len(cold_stored) < 10
        # The run page still says why all 201 were computed: nothing recorded before.
        assert sum(n for _, n in cache.why[-1]["groups"]) == 201

        # Run B changes one argument: its sum's slot has a record, so B explains the sum by
        # its changed dependency (with a recipe made for it), the others as new.
        parts[7] = dask.delayed(_inc, pure=True)(1000)
        total = dask.delayed(sum, pure=True)(parts)
        cached_compute(total, cache=cache, namespace=ns, scheduler="threads")
        assert flush_posts()
        reasons = cache.why[-1]["reasons"]
        assert len(reasons) == 201 and list(reasons.values()).count("never computed") == 200
        assert "_inc, which changed" in reasons[200]


def test_a_run_freezes_the_collectors_view_of_older_objects_and_thaws_it_after() -> None:
    # Full collections walked the graph and the plan again and again during the run
    # (~100 ms of a 1 s 10k-task run); objects older than the run are frozen while it
    # runs, unless something else froze objects (a forking server): that freeze is kept.
    import gc

    def frozen_now(_: object) -> int:
        return gc.get_freeze_count()

    cache = FakeCache()
    assert gc.get_freeze_count() == 0
    (inside,) = cached_compute(dask.delayed(frozen_now, pure=False)(1), cache=cache,
                               namespace=uuid.uuid4().hex, scheduler="threads")
    assert inside > 0 and gc.get_freeze_count() == 0
    gc.freeze()
    try:
        theirs = gc.get_freeze_count()
        (inside,) = cached_compute(dask.delayed(frozen_now, pure=False)(2), cache=cache,
                                   namespace=uuid.uuid4().hex, scheduler="threads")
        # Not thawed (0), not frozen again (more than theirs: the run made objects);
        # some of theirs may have died meanwhile.
        assert 0 < inside <= theirs and 0 < gc.get_freeze_count() <= theirs
    finally:
        gc.unfreeze()
