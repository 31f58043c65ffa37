"""The encoder: values to tagged, length-prefixed bytes, the literal half of a task hash.

Two values encode equally only if they are equal in type and content. Built-in scalars and
containers are encoded here (they are the format); every other type goes to the handler the
registry (:mod:`.registry`) finds for it, and a value no handler claims is encoded by its
class's fingerprint and what ``pickle`` would rebuild it from, walked structurally.
Callables and modules go to the code fingerprints (:mod:`.fingerprints`). Buffers are
hashed with xxh3_128 here, and nothing depends on a memory address, ``PYTHONHASHSEED`` or
pickle bytes. A value that cannot be encoded deterministically raises
:class:`~client_lib.core.errors.VolatileValue`: its task is then not cached (docs/design/hashing.md,
The task hash).

Strings come in two kinds. A *user string* (a value in an argument) may name a file, and
then stands for that file's content (:func:`~.provenance.file_stamp`); an *identifier*
(a module name, qualname, attribute name, dtype string) is written as text and never looked
up on disk. Both encode the same text the same way.
"""

from __future__ import annotations

import functools
import os
import pickle
import struct
import types
from collections.abc import Callable, Hashable
from typing import Any, Protocol

import xxhash

from ..core.errors import VolatileValue
from .provenance import file_stamp, listed_file_stamps
from .registry import Dispatch

__all__ = ["CodeFingerprints", "Encoder", "SubDigest"]

_xxh3 = xxhash.xxh3_128_digest
_pack_d = struct.Struct("<d").pack
_pack_dd = struct.Struct("<dd").pack
_INLINE_BYTES = 4096  # longer byte strings are represented by their digest
_MAX_DEPTH = 200


class CodeFingerprints(Protocol):
    """What the encoder needs from the code fingerprints (:class:`.Fingerprinter`)."""

    def digest(self, obj: Any) -> bytes: ...

    def versioned_digest(self, obj: Any, version: str) -> bytes: ...

    def write_module(self, module: types.ModuleType) -> None: ...


class SubDigest:
    """``with encoder.sub_digest() as d:`` encodes into a buffer of its own; after the
    block ``d.value`` is the 16-byte digest of what was written inside it, and the
    encoder writes where it wrote before (also when the block raises)."""

    __slots__ = ("_enc", "_prefix", "_saved", "value")

    def __init__(self, enc: Encoder, prefix: bytes = b"") -> None:
        self._enc = enc
        self._prefix = prefix
        self._saved: list[bytes] = []
        self.value = b""

    def __enter__(self) -> SubDigest:
        enc = self._enc
        self._saved, enc._out = enc._out, [self._prefix]
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        enc = self._enc
        if exc_type is None:
            self.value = _xxh3(b"".join(enc._out))
        enc._out = self._saved


class Encoder:
    """Writes the encoding of values into its buffer; digests come out of
    :meth:`sub_digest`. Nothing outside this class touches the buffer.

    ``handlers`` is the registry for non-built-in types; ``fingerprints`` builds the code
    fingerprints for this encoder (they encode through it). One encoder per hashing pass:
    not thread safe.
    """

    def __init__(self, handlers: Dispatch,
                 fingerprints: Callable[[Encoder], CodeFingerprints]) -> None:
        self._out: list[bytes] = []
        self._stack: list[int] = []  # ids of containers being walked (cycle guard)
        self._shared: dict[int, tuple[Any, bytes]] = {}  # see write_shared
        self._memo: dict[Hashable, bytes] = {}  # see write_memo
        self._handlers = handlers
        self._code = fingerprints(self)
        # Built-in types by their methods; other types join on first sight, their
        # registered handler bound to this encoder (one dict lookup per value after that).
        self._methods: dict[type, Callable[[Any], None]] = {
            type(None): self._none,
            bool: self._bool,
            int: self._int,
            float: self._float,
            complex: self._complex,
            str: self.write_str,
            bytes: self._bytes,
            bytearray: self._bytearray,
            memoryview: self._memoryview,
            pickle.PickleBuffer: self._picklebuffer,
            tuple: self._tuple,
            list: self._list,
            dict: self._dict,
            set: self._set,
            frozenset: self._frozenset,
            types.MappingProxyType: self._mappingproxy,
            slice: self._slice,
            range: self._range,
            type(Ellipsis): self._ellipsis,
            type(NotImplemented): self._notimplemented,
        }

    # -- the public API ---------------------------------------------------------------------

    def encode(self, obj: Any) -> None:
        """Write any value."""
        method = self._methods.get(type(obj))
        if method is None:
            method = self._methods[type(obj)] = types.MethodType(
                self._handlers.lookup(type(obj)), self)
        method(obj)

    def sub_digest(self, prefix: bytes = b"") -> SubDigest:
        """A context manager: what is written inside the block goes into a digest of its
        own (``prefix`` first), see :class:`SubDigest`."""
        return SubDigest(self, prefix)

    def digest_of(self, obj: Any) -> bytes:
        """The 16-byte digest of one value's encoding (written nowhere)."""
        with SubDigest(self) as sub:
            self.encode(obj)
        return sub.value

    def position(self) -> int:
        """Where the next write goes (for :meth:`written_since`)."""
        return len(self._out)

    def written_since(self, position: int) -> bytes:
        """The bytes written since :meth:`position` returned ``position``, in this block."""
        return b"".join(self._out[position:])

    def write_shared(self, obj: Any, write: Callable[[Any], None] | None = None) -> None:
        """``write(obj)`` (default :meth:`encode`) the first time this encoder meets
        ``obj``; for the same object later, the bytes it wrote then. Only for what cannot
        change while the encoder lives (one hashing pass): a graph task's arguments. The
        encoder holds ``obj``, so its id is never reused."""
        known = self._shared.get(id(obj))
        if known is not None and known[0] is obj:
            self._out.append(known[1])
            return
        start = len(self._out)
        (write or self.encode)(obj)
        self._shared[id(obj)] = (obj, b"".join(self._out[start:]))

    #: Whether :meth:`write_memo` reuses bytes (an encoder with side effects per write,
    #: such as collecting the files strings name, must write every time).
    memoizes = True

    def write_memo(self, key: Hashable, write: Callable[[], None]) -> None:
        """``write()`` the first time this encoder meets ``key``; later, the bytes it
        wrote then. ``key`` must determine those bytes exactly (equal keys, equal
        encodings) for the length of one hashing pass: for small values met again and
        again as equal copies, such as the column labels of every partition of a frame."""
        known = self._memo.get(key) if self.memoizes else None
        if known is not None:
            self._out.append(known)
            return
        start = len(self._out)
        write()
        if self.memoizes:
            self._memo[key] = b"".join(self._out[start:])

    def write_raw(self, data: bytes) -> None:
        """Bytes as they are: a type tag, a digest, a length-prefixed piece."""
        self._out.append(data)

    def write_str(self, obj: str) -> None:
        """A user string: if it names an existing file or directory (it has a ``/``, ``\\``
        or ``.``), the file's stamp is written too, and for a relative name the current
        directory ("table.csv" is the file there)."""
        data = obj.encode("utf-8", "surrogatepass")
        self._out.append(b"s%d:" % len(data))
        self._out.append(data)
        if 2 < len(obj) < 4096 and ("/" in obj or "\\" in obj or "." in obj):
            stamp = file_stamp(obj)
            if stamp is not None:
                if not os.path.isabs(obj):
                    self._out.append(b"@cwd" + os.getcwd().encode("utf-8", "surrogatepass"))
                self._out.append(b"@file" + stamp)

    def write_listed_paths(self, values: Any) -> None:
        """The files that ``values`` (the distinct strings of a column or an array) name,
        stamped as :meth:`write_str` stamps a single string; nothing if none does."""
        found = listed_file_stamps(values)
        if not found:
            return
        self._out.append(b"@paths%d:" % len(found))
        if any(not os.path.isabs(name) for name, _ in found):
            self._out.append(b"@cwd" + os.getcwd().encode("utf-8", "surrogatepass"))
        for name, stamp in found:
            self._out.append(name.encode("utf-8", "surrogatepass") + b"\0" + stamp)

    def write_name(self, name: str) -> None:
        """An identifier (module, qualname, attribute, dtype string, a value's canonical
        text): encoded like a string with that text, never looked up on disk."""
        data = name.encode("utf-8", "surrogatepass")
        self._out.append(b"s%d:" % len(data))
        self._out.append(data)

    def write_names(self, names: tuple) -> None:
        """A tuple of identifiers, ``None``, numbers and such tuples (``(module,
        qualname, version)``), encoded as :meth:`encode` encodes the tuple but with every
        string an identifier."""
        if not names:
            self._out.append(b"()")
            return
        self._out.append(b"(%d:" % len(names))
        for item in names:
            if type(item) is str:
                self.write_name(item)
            elif type(item) is tuple:
                self.write_names(item)
            else:
                self.encode(item)

    def write_buffer(self, tag: bytes, data: Any) -> None:
        """A bytes-like value: inline when short, else its length and digest."""
        if len(data) <= _INLINE_BYTES:
            self._out.append(tag + b"%d:" % len(data))
            self._out.append(bytes(data))
        else:
            self._out.append(tag + b"#%d:" % len(data) + _xxh3(data))

    def write_callable(self, obj: Any) -> None:
        """A function, class or other callable, by its fingerprint."""
        self._out.append(b"F" + self._code.digest(obj))

    def fingerprint(self, obj: Any) -> bytes:
        """A callable's code fingerprint (cached for this pass), without writing it."""
        return self._code.digest(obj)

    def write_versioned_callable(self, obj: Any, version: str) -> None:
        """A callable with ``version`` standing for the code of the function or class it
        calls (``dask.annotate(cache_version=...)``); its bound state still counts."""
        self._out.append(b"F" + self._code.versioned_digest(obj, version))

    def write_module(self, module: types.ModuleType) -> None:
        """A module held as a value: a library by version, a user module by content."""
        self._code.write_module(module)

    def write_described(self, tag: bytes, obj: Any, description: Any,
                        describer: Any = None) -> None:
        """``obj`` as its class, the function that described it (if any) and the value
        it is described by (``__dask_tokenize__``, a registered normaliser)."""
        if not self._enter(obj):
            return
        try:
            self._out.append(tag)
            self.write_callable(type(obj))
            if describer is not None:
                self.write_callable(describer)
            self.encode(description)
        finally:
            self._stack.pop()

    def write_generic(self, obj: Any) -> None:
        """A value no handler claims: a callable by its fingerprint, an object with
        ``__dask_tokenize__`` by what that returns, anything else by its pickled state."""
        if isinstance(obj, type) or callable(obj) and not hasattr(obj, "__dask_tokenize__"):
            self.write_callable(obj)
        elif hasattr(obj, "__dask_tokenize__") and not isinstance(obj, type):
            try:
                token = obj.__dask_tokenize__()
            except Exception as exc:
                raise VolatileValue(f"{type(obj).__qualname__}.__dask_tokenize__ failed "
                                    f"({type(exc).__name__}: {exc})") from None
            self.write_described(b"D", obj, token)
        else:
            # Dataclasses too: their state holds fields and any attribute set later.
            self.write_reduced(obj)

    def write_reduced(self, obj: Any) -> None:
        """An object by its class and what ``pickle`` would rebuild it from."""
        try:
            reduced = obj.__reduce_ex__(5)
        except Exception as exc:
            raise VolatileValue(
                f"{type(obj).__module__}.{type(obj).__qualname__} cannot be hashed "
                f"deterministically ({type(exc).__name__}: {exc})"
            ) from None
        if isinstance(reduced, str):  # a module-level singleton
            self._out.append(b"G")
            self.write_callable(type(obj))
            self.write_name(reduced)
            return
        if not self._enter(obj):
            return
        try:
            self._out.append(b"O")
            self.write_callable(type(obj))
            rebuild, args, *rest = reduced
            self.write_callable(rebuild)
            self.encode(args)
            if rest and isinstance(rest[0], dict):
                rest[0] = _without_caches(type(obj), rest[0])
            for extra in rest:
                if extra is None or isinstance(extra, (dict, tuple, list)):
                    self.encode(extra)
                else:  # listitems / dictitems iterators
                    self.encode(list(extra))
        finally:
            self._stack.pop()

    # -- scalars ------------------------------------------------------------------------------

    def _none(self, obj: None) -> None:
        self._out.append(b"N")

    def _bool(self, obj: bool) -> None:
        self._out.append(b"T" if obj else b"F")

    def _int(self, obj: int) -> None:
        self._out.append(b"i%d;" % obj)

    def _float(self, obj: float) -> None:
        self._out.append(b"f" + _pack_d(obj))

    def _complex(self, obj: complex) -> None:
        self._out.append(b"c" + _pack_dd(obj.real, obj.imag))

    def _bytes(self, obj: bytes | bytearray) -> None:
        self.write_buffer(b"b", bytes(obj) if len(obj) <= _INLINE_BYTES else obj)

    def _bytearray(self, obj: bytearray) -> None:
        self.write_buffer(b"y", bytes(obj) if len(obj) <= _INLINE_BYTES else obj)

    def _memoryview(self, obj: memoryview) -> None:
        # What its elements are (a float32 view is not an int32 view of the same bytes),
        # its shape, whether it can be written, and a layout other than C order.
        self._out.append(b"v%s;%r%s" % (obj.format.encode("ascii", "replace"), obj.shape,
                                        b"r" if obj.readonly else b"w"))
        if not obj.c_contiguous:
            self._out.append(b"%r" % (obj.strides,))
        self.write_buffer(b"b", obj.cast("B") if obj.c_contiguous else obj.tobytes())

    def _picklebuffer(self, obj: pickle.PickleBuffer) -> None:
        # What protocol 5 reduces buffers to (numpy, pyarrow): the bytes it exposes.
        self._out.append(b"pb")
        self._memoryview(memoryview(obj))

    def _slice(self, obj: slice) -> None:
        self._out.append(b"S")
        self._items((obj.start, obj.stop, obj.step))

    def _range(self, obj: range) -> None:
        self._out.append(b"r%d,%d,%d;" % (obj.start, obj.stop, obj.step))

    def _ellipsis(self, obj: Any) -> None:
        self._out.append(b"E")

    def _notimplemented(self, obj: Any) -> None:
        self._out.append(b"I")

    # -- containers ---------------------------------------------------------------------------

    def _items(self, items: Any) -> None:
        encode = self.encode
        for item in items:
            encode(item)

    def _enter(self, obj: Any) -> bool:
        """Start walking a container; on a cycle write a back reference instead. The
        caller pops it in a ``finally``: a value that raises half way (``VolatileValue``)
        must not stay on the stack, or a later value holding that container would be
        written as a back reference, without its content."""
        oid = id(obj)
        if oid in self._stack:
            self._out.append(b"@%d;" % self._stack.index(oid))
            return False
        if len(self._stack) >= _MAX_DEPTH:
            raise VolatileValue(f"value nested deeper than {_MAX_DEPTH} levels")
        self._stack.append(oid)
        return True

    def _tuple(self, obj: tuple) -> None:
        if not obj:
            self._out.append(b"()")
            return
        if self._enter(obj):
            try:
                self._out.append(b"(%d:" % len(obj))
                self._items(obj)
            finally:
                self._stack.pop()

    def _list(self, obj: list) -> None:
        if self._enter(obj):
            try:
                self._out.append(b"[%d:" % len(obj))
                self._items(obj)
            finally:
                self._stack.pop()

    def _dict(self, obj: dict, tag: bytes = b"{") -> None:
        # Insertion order is kept: code may iterate it, so order can change results.
        if self._enter(obj):
            try:
                self._out.append(tag + b"%d:" % len(obj))
                encode = self.encode
                for k, v in obj.items():
                    encode(k)
                    encode(v)
            finally:
                self._stack.pop()

    def _mappingproxy(self, obj: types.MappingProxyType) -> None:
        self._dict(obj, b"{m")  # type: ignore[arg-type]

    def _set(self, obj: set | frozenset, tag: bytes = b"<") -> None:
        # Sorted by encoding: iteration order of a set depends on PYTHONHASHSEED.
        if self._enter(obj):
            try:
                digests = sorted(self.digest_of(item) for item in obj)
                self._out.append(tag + b"%d:" % len(digests))
                self._out.extend(digests)
            finally:
                self._stack.pop()

    def _frozenset(self, obj: frozenset) -> None:
        self._set(obj, b">")


def _without_caches(cls: type, state: dict) -> dict:
    """An object's state minus lazily filled caches (``functools.cached_property``
    values), which depend on what was accessed, not on what the object is."""
    cached = [name for name in state if isinstance(getattr(cls, name, None),
                                                   functools.cached_property)]
    if not cached:
        return state
    return {k: v for k, v in state.items() if k not in cached}
