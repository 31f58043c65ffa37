"""The store policies as pure functions (no server): what ``auto`` stores, and that its
shortcut before measuring a result's size never changes a decision."""

from __future__ import annotations

import dask
import pytest

from client_lib.policy.decisions import Reason
from client_lib.policy.modes import AutoPolicy, Candidate, resolve_policy


def _candidate(seconds: float, nbytes: int, *, upstream: float = 0.0,
               is_output: bool = False) -> Candidate:
    return Candidate("0" * 32, "f", seconds, upstream, nbytes, is_output)


def test_auto_stores_what_costs_more_to_recompute_than_to_load() -> None:
    policy = AutoPolicy(latency=0.005, throughput=1e9)
    assert policy.should_store(_candidate(0.5, 10**6))  # 0.5 s vs ~6 ms
    assert not policy.should_store(_candidate(0.001, 10))  # 1 ms vs 5 ms
    assert not policy.should_store(_candidate(0.01, 10**8))  # 10 ms vs ~105 ms
    assert policy.should_store(_candidate(0.002, 10, upstream=0.01))  # its chain counts
    assert policy.should_store(_candidate(0.0, 10**5, is_output=True))  # small outputs always


def test_auto_stores_large_outputs_only_when_they_pay_back() -> None:
    """Issue 12: a 2 GiB array computed in 3.8 s that loads in ~14 s is not stored."""
    policy = AutoPolicy(latency=0.005, throughput=150e6)
    decision = policy.decide(_candidate(3.8, 2 * 2**30, is_output=True))
    stored, why = decision.store, decision.why
    assert not stored
    assert why.startswith("recompute 3.8 s <= load 14.3 s (default 0.15 GB/s")
    assert policy.decide(_candidate(30.0, 2 * 2**30, is_output=True)).store


def test_auto_uses_the_load_speed_this_worker_learned() -> None:
    policy = AutoPolicy(latency=0.005, throughput=150e6)
    fast = Candidate("0" * 32, "f", 3.8, 0.0, 2 * 2**30, True, "ndarray", 1.4, 5)
    decision = policy.decide(fast)  # direct reads at ~1.5 GB/s: now it pays
    stored, why = decision.store, decision.why
    assert stored and why == ("recompute 3.8 s > load 1.4 s (learned from 5 recent ndarray "
                              "load(s))")
    slow = Candidate("0" * 32, "f", 0.5, 0.0, 10**7, False, "pickle", 0.9, 3)
    assert not policy.decide(slow).store


@pytest.mark.parametrize("seconds", [0.0, 0.001, 0.004, 0.005, 0.006, 0.02, 1.0])
@pytest.mark.parametrize("upstream", [0.0, 0.003])
@pytest.mark.parametrize("is_output", [False, True])
def test_auto_shortcut_agrees_with_the_full_decision(seconds: float, upstream: float,
                                                     is_output: bool) -> None:
    policy = AutoPolicy(latency=0.005, throughput=500e6)
    decisions = {policy.should_store(_candidate(seconds, nbytes, upstream=upstream,
                                                is_output=is_output))
                 for nbytes in (0, 1, 10**3, 10**6, 10**9)}
    if not policy.may_store(seconds + upstream, is_output):
        assert decisions == {False}
    else:
        assert True in decisions or not is_output


def test_other_policies_always_measure() -> None:
    for policy in (resolve_policy("all"), resolve_policy("outputs"),
                   resolve_policy(lambda c: True)):
        assert policy.may_store(0.0, False)


@pytest.mark.parametrize("name,outputs,others", [
    ("all", True, True), ("outputs", True, False), ("none", False, False),
])
def test_named_policies_store_what_their_names_say(name: str, outputs: bool,
                                                   others: bool) -> None:
    policy = resolve_policy(name)
    assert policy.wraps(True) == outputs and policy.wraps(False) == others
    slow_and_small = _candidate(10.0, 1)
    assert policy.should_store(_candidate(10.0, 1, is_output=True)) == outputs
    assert policy.should_store(slow_and_small) == others


def test_a_callable_decides_and_an_unknown_name_is_refused() -> None:
    policy = resolve_policy(lambda c: c.nbytes < 100)
    assert policy.should_store(_candidate(0.0, 99))
    assert not policy.should_store(_candidate(0.0, 100))
    with pytest.raises(ValueError, match="unknown cache policy 'sometimes'"):
        resolve_policy("sometimes")


def test_auto_stores_intermediates_within_the_run_s_byte_bound_only() -> None:
    """Inside a run (``run_read_bytes`` known) an intermediate that pays is stored only if
    the run's admitted intermediates stay within ``max_run_bytes`` x the bytes it read
    plus ``min_run_bytes``; outputs never use the bound. Seconds of storing no longer
    count."""
    policy = AutoPolicy(latency=0.005, throughput=1e9, max_run_bytes=0.5,
                        min_run_bytes=10**6)
    result = Candidate("0" * 32, "f", 0.5, 0.0, 10**7, False, run_read_bytes=4 * 10**7)
    decision = policy.decide(result)  # 10 MB of 21 MB allowed
    assert decision.store and decision.reason is Reason.PAYS
    spent = Candidate("0" * 32, "f", 0.5, 0.0, 10**7, False, run_read_bytes=4 * 10**7,
                      run_admitted_bytes=15 * 10**6)
    decision = policy.decide(spent)
    assert not decision.store and decision.reason is Reason.OVER_BUDGET
    assert decision.why.startswith("over the run's byte bound: the run's intermediates "
                                   "14.3 MiB + this > 20.0 MiB (0.5 x 38.1 MiB read + 1 MiB")
    output = Candidate("0" * 32, "f", 0.5, 0.0, 10**7, True, run_read_bytes=10**7,
                       run_admitted_bytes=10**9)
    assert policy.decide(output).store
    cheap = Candidate("0" * 32, "f", 0.0001, 0.0, 10**7, False, run_read_bytes=10**9)
    assert not policy.decide(cheap).store  # does not pay, whatever the bound
    # A link of a chain: seconds to recompute from where a branch would start, a
    # millisecond to load; stored, whatever follows it (small: within min_run_bytes).
    link = Candidate("0" * 32, "s2", 0.5, 0.5, 100, False, run_read_bytes=0)
    assert policy.decide(link).store


def test_the_byte_bound_comes_from_config() -> None:
    with dask.config.set({"result-cache.auto.max-run-bytes": 0.25,
                          "result-cache.auto.min-run-bytes": 0}):
        policy = resolve_policy("auto")
    assert isinstance(policy, AutoPolicy) and policy.weighs_the_run
    assert (policy.max_run_bytes, policy.min_run_bytes) == (0.25, 0)
    assert not any(resolve_policy(p).weighs_the_run for p in ("all", "outputs", "none"))
