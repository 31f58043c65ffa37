"""The open registry of value handlers: which function encodes a value of a given type.

The shape of ``dask.tokenize.normalize_token``: a handler is registered for a class and
applies to its subclasses (the most specific registered class in the MRO wins); handlers
for a library are registered lazily, the first time a value whose class comes from that
library (by top-level module name) is looked up, so importing the hasher never imports
pandas, h5py, zarr or fsspec. A handler is a small function ``handler(encoder, value)``
that writes the value through the encoder's public methods.

Built-in scalars and containers are not here: the encoder handles them itself (they are
the format, and the hot path). A class registered ``exact=True`` matches that very class
only, not its subclasses.

Users register their own types with :func:`register`, which takes a *normaliser*: a
function returning plain data (tuples, numbers, strings, arrays...) that is encoded in
the value's place, as with ``__dask_tokenize__``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..core.errors import VolatileValue

__all__ = ["HANDLERS", "Dispatch", "Handler", "Writer", "library_types_only", "register"]


class Writer(Protocol):
    """What this module's handlers write through: the :class:`~.encoder.Encoder`, named by
    its methods (the encoder imports this module, never the other way round)."""

    def write_generic(self, obj: Any) -> None: ...

    def write_described(self, tag: bytes, obj: Any, description: Any,
                        describer: Any = None) -> None: ...


#: ``handler(encoder, value)``; handlers elsewhere name the full :class:`~.encoder.Encoder`.
Handler = Callable[[Any, Any], None]


class Dispatch:
    """Handlers by class. Lookups are cached per class; registering clears the cache.

    Thread safe: lazy registration and cache misses take a lock, so no thread can see a
    library half registered (which would encode its values the generic way). ``parent``:
    a registry consulted when this one has no handler for any class in the MRO (a
    per-pass overlay, such as the graph hasher's handlers for graph nodes).
    """

    def __init__(self, default: Handler | None = None, parent: Dispatch | None = None) -> None:
        if (default is None) == (parent is None):
            raise ValueError("give a default handler or a parent registry, not both")
        self._default = default
        self._parent = parent
        self._by_class: dict[type, Handler] = {}
        self._exact: dict[type, Handler] = {}
        self._lazy: dict[str, Callable[[], None]] = {}
        self._cache: dict[type, Handler] = {}
        self._lock = threading.RLock()

    def register(self, *classes: type, exact: bool = False) -> Callable[[Handler], Handler]:
        """Decorator: ``handler`` encodes values of ``classes`` (and their subclasses,
        unless ``exact``)."""

        def decorate(handler: Handler) -> Handler:
            with self._lock:
                for cls in classes:
                    (self._exact if exact else self._by_class)[cls] = handler
                self._cache.clear()
            return handler

        return decorate

    def register_lazy(self, toplevel: str, loader: Callable[[], None]) -> None:
        """Call ``loader`` (which registers handlers, importing what it needs) before the
        first lookup of a class whose MRO holds a class from module ``toplevel``."""
        with self._lock:
            self._lazy[toplevel] = loader
            self._cache.clear()

    def extended(self, handlers: Mapping[type, Handler]) -> Dispatch:
        """A registry with ``handlers`` (by class, with subclasses) in front of this one."""
        child = Dispatch(parent=self)
        child._by_class.update(handlers)
        return child

    def lookup(self, cls: type) -> Handler:
        handler = self._cache.get(cls)
        if handler is None:
            with self._lock:
                handler = self._cache[cls] = self._resolve(cls)
        return handler

    def _resolve(self, cls: type) -> Handler:
        handler = self._exact.get(cls)
        if handler is not None:
            return handler
        mro = cls.__mro__
        if self._lazy:
            for base in mro:
                loader = self._lazy.pop(base.__module__.partition(".")[0], None)
                if loader is not None:
                    loader()
                    self._cache.clear()
                    return self._resolve(cls)
        for base in mro:
            handler = self._by_class.get(base)
            if handler is not None:
                return handler
        if self._parent is not None:
            return self._parent.lookup(cls)
        assert self._default is not None
        return self._default


def library_types_only(library: str) -> Callable[[Handler], Handler]:
    """Decorator for a library's handler: it encodes instances of classes defined in
    ``library`` (by top-level module name); an instance of a subclass defined elsewhere
    may carry state the handler does not know, and is encoded as any other object."""

    def decorate(handler: Handler) -> Handler:
        def guarded(enc: Writer, obj: Any) -> None:
            if type(obj).__module__.partition(".")[0] == library:
                handler(enc, obj)
            else:
                enc.write_generic(obj)

        return guarded

    return decorate


def _encode_generic(enc: Writer, obj: Any) -> None:
    enc.write_generic(obj)


HANDLERS = Dispatch(default=_encode_generic)
"""The process-wide registry every hashing pass starts from."""


def register(*classes: type) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """Decorator: hash values of ``classes`` (and their subclasses) by what ``normalise``
    returns for them.

    ``normalise(value)`` returns plain data that determines the value: numbers, strings,
    tuples, lists, dicts, numpy arrays, other registered values. The hash covers the
    value's class, the normaliser's own code and the data it returned. Strings in the
    data that name existing files stand for the files, as everywhere in an argument. If
    ``normalise`` raises, the task is volatile (never cached). For example::

        from client_lib import register

        @register(Grid)
        def _(grid):
            return (grid.origin, grid.spacing, grid.values)

    Use it for objects whose pickled state is not what makes them equal (handles, caches,
    memory addresses), or to hash a large object by a cheap fingerprint you trust.
    """

    def decorate(normalise: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def handler(enc: Writer, obj: Any) -> None:
            try:
                data = normalise(obj)
            except Exception as exc:
                raise VolatileValue(
                    f"the registered normaliser of {type(obj).__qualname__} failed "
                    f"({type(exc).__name__}: {exc})") from None
            enc.write_described(b"X", obj, data, normalise)

        HANDLERS.register(*classes)(handler)
        return normalise

    return decorate
