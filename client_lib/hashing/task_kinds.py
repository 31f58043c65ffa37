"""Tasks that are not plain functions of their inputs: impure callables, side effects and
handles. docs/correctness.md, "Tasks that are not values".

- **Impure** (the clock, entropy, the process): a task whose own function is a well-known
  impure callable, or one the user lists in ``result-cache.volatile-functions``, is
  volatile: never looked up or stored, and so is everything downstream. Dask's
  ``pure=False`` cannot be told apart from the default, so other tasks are cached by
  content. Only the task's own function counts (unwrapped through ``functools.partial``,
  ``toolz.curry``, ``__wrapped__``, bound methods and ``dask.delayed``): code that *calls*
  ``time.perf_counter`` to time itself is still cached. The global generators and
  unseeded constructors are impure; so is any task that reaches a random generator
  object, seeded or not (its draws advance it: :mod:`.numpy_values`, :mod:`.stdlib_values`).
- **Side effects** (``da.store`` into a target, ``to_zarr``, ``to_parquet``, ``to_csv``,
  ``to_hdf``, ``to_json``, ``to_sql``, ``Bag.to_textfiles``, ``np.save``, pandas'
  writers, anything handed a file opened for writing, and the functions listed in
  ``result-cache.side-effect-functions``): always run, and so does everything downstream
  of them; what feeds them may be loaded, except the task making the target a store
  writes into (``da.store`` into ``delayed(make_target)()``): a loaded copy would be
  written instead of the object the graph made.
- **Handles** (:func:`~client_lib.hashing.handles.handle_kind`): a task creating a handle onto
  outside state is volatile; one creating a scratch store the graph fills itself is pinned
  with the tasks that touch it.

Config lists hold ``"module.qualname"`` names, as a list or separated by commas; a name
also matches a function of a script run as ``__main__`` with that qualname.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Iterator
from typing import Any

from dask._task_spec import TaskRef

from ..core.config import setting
from .handles import handle_kind

__all__ = ["TaskKinds", "callable_name"]

# module -> module-level callables that read the clock, entropy or the process.
_IMPURE = {
    "time": ("time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic",
             "monotonic_ns", "process_time", "process_time_ns", "thread_time",
             "thread_time_ns"),
    "uuid": ("uuid1", "uuid4", "getnode"),
    "os": ("urandom", "getrandom", "getpid", "getppid", "times", "getloadavg"),
    "secrets": ("token_bytes", "token_hex", "token_urlsafe", "randbelow", "randbits",
                "choice"),
}
# Constructors seeded from the operating system when given no seed.
_SEEDABLE = (("numpy.random", "default_rng"), ("numpy.random", "RandomState"),
             ("numpy.random", "SeedSequence"), ("random", "Random"))
_NOW = ("now", "utcnow", "today")

# Functions that write outside the process ("module.qualname").
_WRITERS = frozenset({
    "dask.array.core.load_store_chunk", "dask.array.core.store_chunk",
    "dask.array.core.insert_to_ooc",
    "dask.dataframe.io.csv._write_csv", "dask.dataframe.io.json.write_json_partition",
    "dask.dataframe.io.hdf._pd_to_hdf", "dask.dataframe.io.sql._to_sql_chunk",
    "dask.dataframe.io.parquet.core.ToParquetFunctionWrapper",
    "dask.dataframe.io.parquet.arrow.ArrowDatasetEngine.write_partition",
    "dask.dataframe.io.parquet.arrow.ArrowDatasetEngine.write_metadata",
    "dask.dataframe.io.orc.arrow.ArrowORCEngine.write_partition",
    "dask.bag.core._to_textfiles_chunk", "dask.bag.avro._write_avro_part",
    "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt",
    "numpy.ndarray.tofile", "numpy.ndarray.dump",
})
# Writers (and the readers of what they wrote) by the position of their target: the
# object written into must be the one the graph made, never a loaded copy of it.
_TARGET_ARGUMENT = {
    "dask.array.core.load_store_chunk": 1, "dask.array.core.store_chunk": 1,
    "dask.array.core.insert_to_ooc": 2, "dask.array.core.load_chunk": 0,
}
_PANDAS_WRITERS = frozenset({
    "to_csv", "to_parquet", "to_hdf", "to_sql", "to_json", "to_excel", "to_feather",
    "to_pickle", "to_orc", "to_stata", "to_xml", "to_clipboard",
})
_WRITE_MODES = frozenset("wax+")
_PLAIN = frozenset({int, float, str, bytes, bool, type(None), TaskRef})
_WRAPPER_ATTRS = ("func", "__wrapped__", "_obj", "__func__")
_MAX_UNWRAP = 16


def callable_name(func: Any) -> str:
    """``"module.qualname"`` of a function, method, builtin or callable instance."""
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)  # instances have none (or a __name__)
    owner = getattr(func, "__objclass__", None) or getattr(func, "__self__", None)
    if not module and owner is not None:
        module = (owner if isinstance(owner, type) else type(owner)).__module__
    if not qualname:  # a callable instance: its class
        module, qualname = type(func).__module__, type(func).__qualname__
    return f"{module or ''}.{qualname}"


def _attribute(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name, None)
    except Exception:  # a property that fails: not a wrapper we know
        return None


def _unwrapped(func: Any) -> Iterator[Any]:
    """``func`` and what it delegates to: a partial's or curry's function, a wrapper's
    ``__wrapped__``, a bound method's function, a ``dask.delayed`` leaf's object."""
    for _ in range(_MAX_UNWRAP):
        yield func
        inner = next((v for a in _WRAPPER_ATTRS
                      if callable(v := _attribute(func, a)) and v is not func), None)
        if inner is None:
            return
        func = inner


def _listed(value: Any) -> frozenset[str]:
    if not value:
        return frozenset()
    names = value.split(",") if isinstance(value, str) else value
    return frozenset(str(n).strip() for n in names if str(n).strip())


def _in_list(name: str, names: frozenset[str]) -> bool:
    if name in names:
        return True
    main = name.removeprefix("__main__.") if name.startswith("__main__.") else None
    return bool(main) and any(n.endswith("." + main) for n in names)


def _global_generators() -> tuple[Any, ...]:
    """The hidden global generators of ``random`` and ``numpy.random``."""
    found = [getattr(sys.modules.get("random"), "_inst", None),
             getattr(sys.modules.get("numpy.random.mtrand"), "_rand", None)]
    return tuple(g for g in found if g is not None)


def _resolve(module_name: str, name: str) -> Any:
    return getattr(sys.modules.get(module_name), name, None)


def _writes_a_file(value: Any) -> bool:
    """An fsspec ``OpenFile`` (not yet opened) for writing or appending."""
    mode = getattr(value, "mode", None)
    return (type(value).__name__ == "OpenFile" and isinstance(mode, str)
            and bool(_WRITE_MODES & set(mode)))


def _writes_a_file_in(value: Any) -> bool:
    """``value``, or an item of a list or tuple it is, is a file opened for writing."""
    return _writes_a_file(value) or type(value) in (list, tuple) and any(
        _writes_a_file(x) for x in value[:64])


class TaskKinds:
    """Classifies the tasks of one hashing pass. Reads the config lists once and
    remembers its answers per function object; not thread safe."""

    def __init__(self) -> None:
        self._volatile = _listed(setting("volatile-functions"))
        self._effects = _listed(setting("side-effect-functions"))
        self._impure: dict[int, tuple[Any, str]] = {}
        for module_name, names in _IMPURE.items():
            for name in names:
                func = _resolve(module_name, name)
                if func is not None:
                    self._impure[id(func)] = (func, f"{module_name}.{name}")
        self._seedable = [f for m, n in _SEEDABLE if (f := _resolve(m, n)) is not None]
        self._seedable_ids = frozenset(id(f) for f in self._seedable)
        self._globals = _global_generators()
        self._decided: dict[tuple[int, str], tuple[Any, Any]] = {}

    def _cached(self, what: str, func: Any, decide: Any) -> Any:
        hit = self._decided.get((id(func), what))
        if hit is not None and hit[0] is func:
            return hit[1]
        answer = decide(func)
        self._decided[(id(func), what)] = (func, answer)
        return answer

    # -- volatile: impure callables and handles onto outside state --------------------------

    def volatile_reason(self, func: Any, args: tuple = (), kwargs: dict | None = None
                        ) -> str | None:
        """Why a task calling ``func(*args, **kwargs)`` must never be cached, or ``None``."""
        if id(func) in self._seedable_ids and any(func is f for f in self._seedable) and (
                not args) and not any(
                v is not None for v in (kwargs or {}).values()):
            return f"{callable_name(func)} without a seed draws from the operating system"
        return self._cached("volatile", func, self._volatile_reason)

    def depends_on_arguments(self, func: Any) -> bool:
        """Whether :meth:`volatile_reason` for ``func`` looks at the task's arguments (a
        seedable constructor: volatile only without a seed)."""
        return id(func) in self._seedable_ids

    def _volatile_reason(self, func: Any) -> str | None:
        for inner in _unwrapped(func):
            found = self._impure_reason(inner)
            if found is not None:
                return found
            if handle_kind(inner) == "external":
                return f"{callable_name(inner)} opens a handle onto external state"
        return None

    def _impure_reason(self, func: Any) -> str | None:
        known = self._impure.get(id(func))
        if known is not None and known[0] is func:
            return f"{known[1]} is impure (the clock, entropy or the process)"
        owner = getattr(func, "__self__", None)
        if owner is not None:
            if isinstance(owner, type) and issubclass(owner, datetime.date) and getattr(
                    func, "__name__", None) in _NOW:
                return f"{callable_name(func)} reads the clock"  # pandas.Timestamp.now too
            if any(owner is g for g in self._globals):
                return f"{callable_name(func)} draws from the global random state"
            if type(owner).__name__ == "SystemRandom":
                return f"{callable_name(func)} draws from the operating system's entropy"
        if self._volatile and _in_list(callable_name(func), self._volatile):
            return f"{callable_name(func)} is listed in result-cache.volatile-functions"
        return None

    # -- always run ---------------------------------------------------------------------------

    def side_effect(self, func: Any, args: tuple = (), kwargs: dict | None = None) -> bool:
        """Whether a task calling ``func(*args, **kwargs)`` exists for a side effect."""
        return self._cached("effect", func, self._writes) or self.writes_in_arguments(
            args, kwargs)

    @staticmethod
    def writes_in_arguments(args: tuple, kwargs: dict | None) -> bool:
        """Whether an argument (or an item of a list or tuple argument) is a file opened
        for writing: the task's side effect, whatever its function."""
        for v in args:
            if type(v) not in _PLAIN and _writes_a_file_in(v):
                return True
        return bool(kwargs) and any(_writes_a_file_in(v) for v in kwargs.values())

    def _writes(self, func: Any) -> bool:
        for inner in _unwrapped(func):
            name = callable_name(inner)
            if name in _WRITERS:
                return True
            if name.startswith("pandas.") and name.rpartition(".")[2] in _PANDAS_WRITERS:
                return True
            if self._effects and _in_list(name, self._effects):
                return True
        return False

    def write_target(self, func: Any) -> int | None:
        """The position of the argument a writer writes into (or reads back from), for
        Dask's own writers; ``None`` for other functions."""
        return self._cached("target", func, lambda f: next(
            (_TARGET_ARGUMENT[n] for inner in _unwrapped(f)
             if (n := callable_name(inner)) in _TARGET_ARGUMENT), None))

    def scratch(self, func: Any) -> bool:
        """Whether ``func`` creates a store the graph fills and reads itself."""
        return self._cached("scratch", func, lambda f: any(
            handle_kind(inner) == "scratch" for inner in _unwrapped(f)))
