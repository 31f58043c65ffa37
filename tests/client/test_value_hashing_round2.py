"""Task hashes for the value and code classes of issue 10, in this process: what a value
is (its zone, unit, precision, element types, the files it names), what a version
replaces (the code, never the bound state), which callables are never cached, and that
a function is identified by what it does, not by the module it sits in.

The same cases run end to end in fresh processes in tests/correctness; these are the
fast, precise checks of the hash itself through the public ``task_hashes``.
"""

from __future__ import annotations

import datetime
import functools
import importlib.util
import os
import random
import sys
import time
import types
import uuid
from pathlib import Path
from zoneinfo import ZoneInfo

import dask
import numpy as np
import pandas as pd
import pytest

from client_lib import cache_version, task_hashes


def identity(x):
    return x


def value_hash(value) -> str | None:
    return task_hashes(dask.delayed(identity, pure=True)(value, dask_key_name="v"))["v"]


def call_hash(func, *args, **kwargs) -> str | None:
    return task_hashes(dask.delayed(func, pure=True)(*args, dask_key_name="f", **kwargs))["f"]


def assert_all_differ(values: list) -> None:
    hashes = [value_hash(v) for v in values]
    assert None not in hashes
    assert len(set(hashes)) == len(hashes), hashes


# -- 3. time zones by identity -------------------------------------------------------------


def test_aware_datetimes_hash_by_their_zone_not_its_current_offset():
    wall = datetime.datetime(2024, 1, 15, 9)
    # All four are 09:00 at UTC+0 today; half a year later they are not all the same.
    zones = [ZoneInfo("UTC"), ZoneInfo("Europe/London"), ZoneInfo("Africa/Abidjan"),
             datetime.UTC]
    assert_all_differ([wall.replace(tzinfo=z) for z in zones])
    assert_all_differ([datetime.time(9, tzinfo=z) for z in zones])
    assert value_hash(wall.replace(tzinfo=ZoneInfo("Europe/London"))) == value_hash(
        wall.replace(tzinfo=ZoneInfo("Europe/London")))


def test_pandas_zones_are_part_of_timestamps_indexes_and_columns():
    assert_all_differ([pd.Timestamp("2024-01-15 09:00", tz=z)
                       for z in ("UTC", "Europe/London", "Africa/Abidjan")])
    wall = pd.Series(pd.to_datetime(["2024-01-15 09:00"] * 2))
    assert_all_differ([wall.dt.tz_localize(z) for z in ("UTC", "Europe/London")])
    assert_all_differ([pd.DatetimeIndex(wall).tz_localize(z)
                       for z in ("UTC", "Europe/London")])
    assert value_hash(pd.Timestamp("2024-01-15 09:00", tz="Europe/London")) == value_hash(
        pd.Timestamp("2024-01-15 09:00", tz="Europe/London"))


# -- 4., 5. pandas precision and units -----------------------------------------------------


def test_timedeltas_keep_nanoseconds():
    assert_all_differ([pd.Timedelta(100, "ns"), pd.Timedelta(900, "ns"),
                       pd.Timedelta(1, "us"), datetime.timedelta(microseconds=1)])
    assert value_hash(pd.Timedelta(900, "ns")) == value_hash(pd.Timedelta(900, "ns"))


def test_timestamps_keep_their_unit_and_nanoseconds():
    ts = pd.Timestamp("2024-01-15 09:00")
    assert_all_differ([ts.as_unit(u) for u in ("s", "ms", "us", "ns")])
    assert_all_differ([pd.Timestamp(1_000_000_001, unit="ns"),
                       pd.Timestamp(1_000_000_002, unit="ns")])
    assert_all_differ([pd.Timedelta(1, "s").as_unit(u) for u in ("s", "ns")])


# -- 6. element types of object columns and arrays ------------------------------------------


def test_object_columns_and_arrays_hash_their_element_types():
    as_bytes, as_str = [b"apple", b"pear", b"apple"], ["apple", "pear", "apple"]
    assert_all_differ([pd.Series(as_bytes, dtype=object), pd.Series(as_str, dtype=object)])
    assert_all_differ([pd.Index(as_bytes, dtype=object), pd.Index(as_str, dtype=object)])
    assert_all_differ([pd.Series(pd.Categorical(as_bytes)), pd.Series(pd.Categorical(as_str))])
    assert_all_differ([np.array(as_bytes, dtype=object), np.array(as_str, dtype=object)])
    assert_all_differ([pd.Series([np.str_("a"), "b"], dtype=object),
                       pd.Series(["a", "b"], dtype=object)])


# -- 10., 11. paths wherever they sit, directories through symlinks ------------------------


@pytest.fixture
def listed(tmp_path) -> list[str]:
    paths = [tmp_path / "a.csv", tmp_path / "b.csv"]
    for path in paths:
        path.write_text("v\n1\n")
    return [str(p) for p in paths]


CONTAINERS = {
    "list": lambda paths: paths,
    "DataFrame column": lambda paths: pd.DataFrame({"path": paths}),
    "Series": lambda paths: pd.Series(paths),
    "string[python] Series": lambda paths: pd.Series(paths, dtype="string"),
    "Index": lambda paths: pd.Index(paths),
    "Categorical": lambda paths: pd.Series(pd.Categorical(paths)),
    "numpy <U": lambda paths: np.array(paths),
    "numpy S": lambda paths: np.array(paths, dtype="S"),
    "numpy object": lambda paths: np.array(paths, dtype=object),
    "tuple in an object column": lambda paths: pd.Series([tuple(paths)] * 2),
}


@pytest.mark.parametrize("container", list(CONTAINERS), ids=list(CONTAINERS))
def test_a_listed_file_is_stamped_wherever_it_sits(listed, container):
    build = CONTAINERS[container]
    before = value_hash(build(listed))
    assert before is not None and value_hash(build(listed)) == before
    with open(listed[1], "a") as f:
        f.write("22\n")  # a new size
    assert value_hash(build(listed)) != before


def test_directory_stamps_follow_symlinks_and_survive_cycles(tmp_path):
    data, elsewhere = tmp_path / "data", tmp_path / "elsewhere" / "part2024"
    data.mkdir()
    elsewhere.mkdir(parents=True)
    (data / "own.txt").write_text("own\n")
    (elsewhere / "f.txt").write_text("1\n")
    os.symlink(elsewhere, data / "part2024")
    os.symlink(data, data / "loop")  # a cycle: must not hang or explode
    os.symlink(tmp_path, elsewhere / "up")  # a cycle through the parent
    before = value_hash(str(data))
    assert before is not None and value_hash(str(data)) == before
    with open(elsewhere / "f.txt", "a") as f:
        f.write("22\n")
    assert value_hash(str(data)) != before


# -- 12. getattr with a literal name -----------------------------------------------------


def test_getattr_with_a_literal_name_is_an_attribute_access(monkeypatch):
    settings = types.ModuleType("round2_settings")
    settings.SCALE = 2
    monkeypatch.setitem(sys.modules, "round2_settings", settings)

    def read(x):
        return x * getattr(settings, "SCALE")  # noqa: B009 (the case under test)

    def read_default(x):
        return x * getattr(settings, "SCALE", 1)

    before = (call_hash(read, 1), call_hash(read_default, 1))
    assert None not in before
    monkeypatch.setattr(settings, "SCALE", 3)
    after = (call_hash(read, 1), call_hash(read_default, 1))
    assert before[0] != after[0] and before[1] != after[1]


# -- 7.-9. a version replaces the code, never the bound state --------------------------------


class Scaler:
    def __init__(self, k):
        self.k = k

    @cache_version("1")
    def apply(self, x):
        return x * self.k


class PlainScaler:
    def __init__(self, k):
        self.k = k

    def apply(self, x):
        return x * self.k


@cache_version("1")
class Mul:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return x * self.k


def versioned_closure(k, offset=0):
    @cache_version("1")
    def f(x, extra=offset):
        return x * k + extra

    return f


def mul(x, k):
    return x * k


def annotated_hash(func) -> str | None:
    with dask.annotate(cache_version="1"):
        return call_hash(func, 1)


def test_a_version_keeps_bound_instances_closures_defaults_and_partial_arguments():
    assert call_hash(Scaler(2).apply, 1) != call_hash(Scaler(3).apply, 1)  # 7.
    assert call_hash(versioned_closure(2), 1) != call_hash(versioned_closure(3), 1)  # 8.
    assert call_hash(versioned_closure(2, 1), 1) != call_hash(versioned_closure(2, 2), 1)
    assert call_hash(Mul(2), 1) != call_hash(Mul(3), 1)
    assert call_hash(Mul(2), 1) == call_hash(Mul(2), 1)
    partial = [annotated_hash(functools.partial(mul, k=k)) for k in (2, 3)]  # 9.
    bound = [annotated_hash(PlainScaler(k).apply) for k in (2, 3)]
    assert None not in partial + bound
    assert partial[0] != partial[1] and bound[0] != bound[1]


def versioned_step(body: str, version: str):
    """``step`` with the given body (code, not a closure cell) under ``version``."""
    namespace: dict = {}
    exec(f"def step(x):\n    return x + {body}\n", namespace)
    return cache_version(version)(namespace["step"])


def test_a_version_still_replaces_the_code():
    assert call_hash(versioned_step("1", "1"), 1) == call_hash(versioned_step("2", "1"), 1)
    assert call_hash(versioned_step("1", "1"), 1) != call_hash(versioned_step("1", "2"), 1)



# -- 13. impure callables ------------------------------------------------------------------


IMPURE = [time.time, time.time_ns, time.perf_counter, time.monotonic,
          datetime.datetime.now, datetime.datetime.utcnow, datetime.datetime.today,
          datetime.date.today, uuid.uuid1, uuid.uuid4, random.random, random.choice,
          os.urandom, os.getpid, np.random.random, np.random.rand, np.random.normal,
          pd.Timestamp.now]


@pytest.mark.parametrize("func", IMPURE, ids=lambda f: getattr(f, "__qualname__", str(f)))
def test_well_known_impure_callables_are_volatile(func):
    assert task_hashes(dask.delayed(func, pure=False)(dask_key_name="t")) == {"t": None}
    wrapped = dask.delayed(functools.partial(func), pure=True)(dask_key_name="t")
    assert task_hashes(wrapped) == {"t": None}


def test_seeded_generators_are_volatile_and_seeding_is_not():
    # A draw advances the generator: the next draw differs (issue 27, case 5).
    assert call_hash(np.random.default_rng(5).random, 3) is None
    assert call_hash(np.random.RandomState(5).random_sample, 3) is None
    assert call_hash(random.Random(5).random) is None
    assert call_hash(len, np.random.default_rng(5).bit_generator) is None
    assert call_hash(np.random.default_rng, 5) is not None  # a new generator each time
    assert call_hash(np.random.default_rng, np.random.SeedSequence(5)) is not None
    # Without a seed, the generator is seeded from the operating system's entropy.
    for unseeded in (np.random.default_rng, np.random.RandomState, random.Random):
        assert call_hash(unseeded) is None, unseeded


def read_clock():
    return time.time()


@pytest.mark.parametrize("listed", [f"{__name__}.read_clock",
                                    f"other.module.fn, {__name__}.read_clock",
                                    ["other.module.fn", f"{__name__}.read_clock"]])
def test_result_cache_volatile_functions_lists_a_users_impure_functions(listed):
    assert call_hash(read_clock) is not None
    with dask.config.set({"result-cache.volatile-functions": listed}):
        assert call_hash(read_clock) is None
        assert call_hash(identity, 1) is not None


# -- 14. filesystems and locks by what they are -----------------------------------------------


def test_fsspec_filesystems_hash_by_protocol_and_storage_options():
    import fsspec

    local = fsspec.filesystem("file")
    assert value_hash(local) is not None
    assert value_hash(local) == value_hash(fsspec.filesystem("file", skip_instance_cache=True))
    assert value_hash(local) != value_hash(fsspec.filesystem("memory"))
    assert value_hash(fsspec.filesystem("file", auto_mkdir=True)) != value_hash(
        fsspec.filesystem("file", auto_mkdir=False))


def test_the_locks_dask_hands_to_io_tasks_hash_by_kind():
    """read_hdf, to_hdf and from_array(lock=True) get one from get_scheduler_lock: a
    SerializableLock, or a distributed.Lock under a client; each has a random name."""
    import distributed
    from dask.utils import SerializableLock

    assert value_hash(SerializableLock()) == value_hash(SerializableLock())
    assert value_hash(distributed.Lock()) == value_hash(distributed.Lock())
    # Which one depends on the scheduler, not on what the task computes.
    assert value_hash(SerializableLock()) == value_hash(distributed.Lock())


# -- 15., 17. code by what it does ------------------------------------------------------------

SOURCE = """
import numpy as np

FACTOR = {factor}


def step(x):
    return np.asarray(x) * FACTOR + helper(x)


def helper(x):
    return 1
"""


def _load(path: Path, name: str, source: str) -> types.ModuleType:
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_the_module_a_function_lives_in_is_not_part_of_its_hash(tmp_path):
    try:
        first = _load(tmp_path / "first.py", "round2_first", SOURCE.format(factor=2))
        second = _load(tmp_path / "second.py", "round2_second", SOURCE.format(factor=2))
        third = _load(tmp_path / "third.py", "round2_third", SOURCE.format(factor=3))
        main = _load(tmp_path / "main.py", "__round2_main__", SOURCE.format(factor=2))
        main.step.__module__ = "__main__"
        hashes = [call_hash(m.step, 1) for m in (first, second, main, third)]
    finally:
        for name in ("round2_first", "round2_second", "round2_third", "__round2_main__"):
            sys.modules.pop(name, None)
    assert None not in hashes
    assert hashes[0] == hashes[1] == hashes[2]  # the same code, constants and callees
    assert hashes[3] != hashes[0]  # what it computes differs


LIBRARY = """
import functools


def build():
    return [lambda x: x + 1, lambda x: x * 100]


def nested(k):
    def scale(x):
        return x * k

    return scale


def public(x):
    return x


partial_public = functools.partial(public)
"""


def test_library_lambdas_and_nested_functions_hash_by_code_and_closures(tmp_path,
                                                                        monkeypatch):
    site = tmp_path / "site-packages"
    (site / "round2_lib").mkdir(parents=True)
    (site / "round2_lib" / "__init__.py").write_text(LIBRARY)
    monkeypatch.syspath_prepend(str(site))
    import round2_lib

    try:
        add, times = round2_lib.build()
        assert call_hash(add, 1) != call_hash(times, 1)
        assert call_hash(round2_lib.nested(2), 1) != call_hash(round2_lib.nested(3), 1)
        assert call_hash(round2_lib.nested(2), 1) == call_hash(round2_lib.nested(2), 1)
        assert call_hash(round2_lib.public, 1) is not None
    finally:
        sys.modules.pop("round2_lib", None)


def test_a_delayed_task_over_a_dask_array_hashes_without_crashing():
    """``dask.delayed`` wraps a collection argument in ``ProhibitReuse`` copies whose
    inlined fused tasks name keys outside their dependencies; hashing once raised
    RuntimeError and failed the user's computation."""
    import dask.array as da

    x = (da.arange(20.0, chunks=5) * 3).sum(axis=0, keepdims=True)
    hashes = task_hashes(dask.delayed(np.save, pure=True)(x, "unused.npy"))
    assert hashes and None not in hashes.values()


def test_string_arrays_that_no_file_can_name_still_hash():
    """A ``<U`` array holding code points beyond Unicode (bytes flipped in place) makes
    numpy's string functions fail; the path scan must not fail the hash."""
    arr = np.array(["abc.d", "x/yz"])
    raw = arr.view(np.uint8)
    raw[3] ^= 0xFF
    assert value_hash(arr) is not None and value_hash(arr) != value_hash(
        np.array(["abc.d", "x/yz"]))
