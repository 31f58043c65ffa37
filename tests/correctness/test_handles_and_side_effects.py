"""Handles, side effects, impure callables and warnings, as a user meets them (issue 10,
items 1, 2, 13, 16 and 18): each scenario runs in fresh processes against a real cache
server, and ``cached_compute`` must show the user what plain ``dask.compute`` shows in
the same process, on every run.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests._compare import assert_same
from tests.correctness import _round2_scenarios as scenarios
from tests.correctness._fresh import namespace, run_scenario

pytestmark = pytest.mark.slow  # fresh processes


# -- 1. handles to external mutable state: a bag's disk shuffle ----------------------------


def test_bag_disk_shuffle_never_reads_an_earlier_runs_store(cache_server, tmp_path):
    """Three runs over other data, then the last one again: every run's groups are its
    own, the unchanged rerun is served from the cache, and no partd store outlives its
    run."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    ns = namespace()
    for start in (0, 100, 200, 200):
        result = run_scenario(cache_server, tmp_path / "shuffle", "shuffle",
                              scenarios.BAG_SHUFFLE, start, namespace=ns,
                              env={"TMPDIR": str(scratch)})
        wanted = [(k, [v for v in range(start, start + 12) if v % 3 == k]) for k in range(3)]
        assert result["expected"] == wanted
        assert result["value"] == wanted, f"run starting at {start}"
    (report,) = result["reports"]
    assert report["computed"] == 0 and report["loaded"] >= 1, report
    assert not list(scratch.glob("*.partd")), "a partd store outlived its run"


# -- 2. tasks that exist for a side effect ------------------------------------------------

WRITERS = ["store_numpy", "to_zarr", "to_parquet", "to_csv", "to_json", "to_hdf",
           "to_textfiles", "user_writer"]


@pytest.fixture(scope="module")
def writer_runs(cache_server, tmp_path_factory) -> tuple[dict, dict]:
    """Every writer run cold, then warm, in two fresh processes (outputs removed first)."""
    directory = tmp_path_factory.mktemp("writers")
    ns = namespace()
    return tuple(run_scenario(cache_server, directory, "writers", scenarios.WRITERS, WRITERS,
                              namespace=ns) for _ in range(2))


@pytest.mark.parametrize("writer", WRITERS)
def test_side_effect_tasks_run_on_warm_runs_while_their_inputs_load(writer_runs, writer):
    cold, warm = writer_runs
    for phase, result in zip(("cold", "warm"), writer_runs, strict=True):
        assert_same(result["value"][writer], result["expected"][writer], f"{phase} {writer}")
    report = warm["reports"][WRITERS.index(writer)]
    assert report["volatile"] == 0, report["volatile_reasons"]
    assert report["loaded"] >= 1, report  # what feeds the writer comes from the cache
    assert report["computed"] >= 1, report  # and the writer runs


# -- 13. well-known impure callables -----------------------------------------------------


def test_impure_callables_are_never_served_from_the_cache(cache_server, tmp_path):
    directory = tmp_path / "impure"
    directory.mkdir()
    config = {"result-cache.volatile-functions": "impure.read_clock"}
    ns = namespace()
    runs = []
    for clock in ("first", "second"):
        (directory / "clock.txt").write_text(clock)
        runs.append(run_scenario(cache_server, directory, "impure", scenarios.IMPURE,
                                 namespace=ns, config=config, compare=False))
    first, second = (r["value"] for r in runs)
    (report,) = runs[1]["reports"]
    impure = [name for name in first if name not in ("listed", "seeded")]
    assert len(impure) >= 18
    for name in impure:
        assert name in report["computed_keys"], (name, report)
        assert name not in report["loaded_keys"], (name, report)
    assert second["os.getpid"] == runs[1]["pid"] != first["os.getpid"]
    for name in ("time.time", "time.time_ns", "time.perf_counter", "time.monotonic",
                 "datetime.now", "datetime.utcnow", "datetime.today"):
        assert second[name] > first[name], name
    for name in ("uuid.uuid1", "uuid.uuid4", "random.random", "random.randint",
                 "secrets.token_hex", "os.urandom", "np.random.random",
                 "np.random.randint"):
        assert second[name] != first[name], name
    assert not np.array_equal(second["np.random.rand"], first["np.random.rand"])
    assert second["listed"] == "second"  # named in result-cache.volatile-functions
    assert "listed" in report["volatile_reasons"] or report["volatile"] >= len(impure) + 1
    # A seeded generator's method advances it: never served from the cache (issue 27,
    # case 5); a fresh process draws what the last one drew first, as Dask does.
    assert "seeded" in report["computed_keys"], report
    assert "seeded" not in report["loaded_keys"], report
    np.testing.assert_array_equal(second["seeded"], first["seeded"])


# -- 16. an open file as a result ----------------------------------------------------------


def test_a_task_returning_an_open_file_gives_an_open_file_on_every_run(cache_server,
                                                                       tmp_path):
    directory = tmp_path / "files"
    directory.mkdir()
    (directory / "notes.txt").write_text("line one\nline two\n")
    ns = namespace()
    for phase in ("cold", "warm"):
        result = run_scenario(cache_server, directory, "files", scenarios.OPEN_FILES,
                              namespace=ns)
        assert result["value"] == result["expected"], phase
        assert all(kind == "_io.TextIOWrapper" for kind, _ in result["value"]), result
    (report,) = result["reports"]
    assert report["loaded"] == 0, report  # a handle is never stored, so never loaded


# -- 18. warnings ----------------------------------------------------------------------------


def test_warm_runs_raise_the_warnings_of_the_tasks_they_load(cache_server, tmp_path):
    ns = namespace()
    for phase in ("cold", "warm"):
        result = run_scenario(cache_server, tmp_path / "warn", "warn", scenarios.WARNINGS,
                              namespace=ns)
        for name, (value, raised) in result["value"].items():
            expected_value, expected_raised = result["expected"][name]
            assert_same(value, expected_value, f"{phase} {name}")
            assert expected_raised, f"numpy should warn in {name}"
            assert raised == expected_raised, (phase, name)
    for report in result["reports"]:  # warm: every output loaded, nothing recomputed
        assert report["computed"] == 0 and report["loaded"] >= 1, report


# -- issue 27: the target of a store, made by a task ---------------------------------------


def test_a_store_writes_into_the_target_its_graph_made_on_every_run(cache_server, tmp_path):
    """``da.store(x, delayed(make_target)(...))``: the task making the target always runs
    (a loaded copy would be written into instead), while the source chunks load."""
    from tests.correctness._round3_scenarios import STORE_TARGETS

    ns = namespace()
    for phase in ("cold", "warm"):
        result = run_scenario(cache_server, tmp_path / "targets", "targets", STORE_TARGETS,
                              namespace=ns)
        assert result["value"] == result["expected"], phase
        assert result["value"] == [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]] * 2 + [
            [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]], phase
    assert any(report["loaded"] for report in result["reports"]), result["reports"]
