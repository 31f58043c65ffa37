"""Code fingerprints: what a callable computes, independent of where it lives in memory
or which module holds it.

User code (any module whose file is not under site-packages and not in the standard
library, whatever its name) is identified by its code: bytecode, constants (nested code
recursively), names, defaults, keyword defaults, closure cells, function attributes
(``__wrapped__``, a singledispatch registry), the module-level globals the code references
(functions recursively with a cycle guard, classes by their methods and attributes,
constants by value, user modules and packages by the attributes the code names,
:mod:`.bytecode`) and the modules it imports in its body; not by its module's name.
Library code is identified by module, qualname and the installed version of its
distribution (:mod:`.provenance`) where that name leads back to it; a library's lambdas,
nested functions and factory products by code, closures and defaults as well. A version
(:mod:`.user_versions`) stands for code only, never for bound state. Wrappers count what
they wrap (``functools.lru_cache``, ``toolz.curry``). docs/design/hashing.md, The task
hash, and docs/correctness.md for what is not seen. (A little over 400 lines: one class
that must tell every kind of callable apart.)
"""

from __future__ import annotations

import functools
import pickle
import sys
import types
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from ..core.errors import VolatileValue
from .bytecode import code_imports, code_names, imported_module
from .provenance import PYTHON, compiled_stamp, library_version, resolves_to
from .user_versions import script_module_name

if TYPE_CHECKING:
    from .encoder import Encoder

__all__ = ["Fingerprinter"]

# Class attributes that are bookkeeping, not behaviour (some appear lazily, e.g. after
# pickling or an isinstance check against an ABC, so they must never enter a hash).
_IGNORED_CLASS_ATTRS = frozenset({
    "__dict__", "__weakref__", "__module__", "__doc__", "__qualname__", "__firstlineno__",
    "__static_attributes__", "__slotnames__", "__abstractmethods__", "_abc_impl",
    "__dataclass_fields__", "__dataclass_params__", "__annotations__", "__orig_bases__",
    "__parameters__", "__match_args__", "__annotate__", "__annotate_func__",
    "__annotations_cache__", "_member_map_", "_value2member_map_", "_member_names_",
    "_member_type_", "_unhashable_values_", "_new_member_", "_value_repr_",
    "__cache_version__",
})

_MODULE_TYPE = types.ModuleType
_BUILTIN_TYPES = (types.BuiltinFunctionType, types.BuiltinMethodType)
_DESCRIPTOR_TYPES = (
    types.MethodDescriptorType, types.WrapperDescriptorType, types.MethodWrapperType,
    types.ClassMethodDescriptorType, types.GetSetDescriptorType,
    types.MemberDescriptorType,
)


class Fingerprinter:
    """Computes 16-byte fingerprints of callables and classes, encoding through ``enc``.

    One instance per hashing pass: it caches by object identity and keeps the objects
    alive, so an id cannot be reused while the cache holds it. Globals are read at hash
    time, so a module constant mutated between two passes is seen. Not thread safe.
    """

    def __init__(self, enc: Encoder) -> None:
        self.enc = enc
        self._modules: list[str] = []  # user modules being encoded as values
        self._cache: dict[tuple[int, Any], tuple[Any, bytes]] = {}
        # An annotated version (dask.annotate(cache_version=...)): the ids of the
        # functions and classes whose code it replaces, and the version.
        self._override: tuple[frozenset[int], str] | None = None
        self._override_key: Any = None
        self._code_cache: dict[int, tuple[types.CodeType, bytes]] = {}
        self._stack: list[int] = []
        self._tainted: list[bool] = []

    def digest(self, obj: Any) -> bytes:
        """The fingerprint of a callable or class; raises :class:`VolatileValue`."""
        oid = id(obj)
        hit = self._cache.get((oid, self._override_key))
        if hit is not None:
            return hit[1]
        if oid in self._stack:
            # A cycle: refer to the function by name. Every frame above it depends on
            # this, so their fingerprints are not cached (their value depends on where
            # the walk started); the frame of ``obj`` itself is canonical.
            pos = self._stack.index(oid)
            for i in range(pos + 1, len(self._tainted)):
                self._tainted[i] = True
            return xxhash.xxh3_128_digest(b"cycle\0" + _name(obj).encode())
        self._stack.append(oid)
        self._tainted.append(False)
        try:
            with self.enc.sub_digest() as sub:
                self._describe(obj)
        finally:
            self._stack.pop()
            tainted = self._tainted.pop()
        if not tainted:
            self._cache[(oid, self._override_key)] = (obj, sub.value)
        return sub.value

    def versioned_digest(self, obj: Any, version: str) -> bytes:
        """The fingerprint of ``obj`` with ``version`` in place of the code of the
        function or class it calls (``dask.annotate(cache_version=...)``): a bound
        instance, a partial's arguments, closure cells and defaults still count."""
        saved = self._override, self._override_key
        self._override = (frozenset(id(t) for t in _version_targets(obj)), version)
        self._override_key = (id(obj), version)
        try:
            return self.digest(obj)
        finally:
            self._override, self._override_key = saved

    def _version_of(self, obj: Any) -> str | None:
        """The version that replaces the code of this function or class: its own
        ``@cache_version`` (never one inherited from a base class), or an annotation's."""
        own = vars(obj).get("__cache_version__") if hasattr(obj, "__dict__") else None
        if isinstance(own, str):
            return own
        if self._override is not None and id(obj) in self._override[0]:
            return self._override[1]
        return None

    def write_module(self, module: types.ModuleType) -> None:
        """A module held as a value (an argument, a class attribute): a library by
        version, a user module by all its attributes."""
        enc = self.enc
        name = module.__name__
        version = library_version(name.partition(".")[0])
        enc.write_raw(b"m")
        enc.write_names((name, version))
        if version is not None:
            return
        if name in self._modules:  # a cycle through module attributes
            enc.write_raw(b"@%d;" % self._modules.index(name))
            return
        self._modules.append(name)
        try:
            for attr, value in sorted(vars(module).items()):
                if not attr.startswith("__"):
                    enc.write_name(attr)
                    enc.encode(value)
        finally:
            self._modules.pop()

    # -- kinds of callables -------------------------------------------------------------------

    def _describe(self, obj: Any) -> None:
        enc = self.enc
        if isinstance(obj, types.FunctionType):
            self._function(obj)
        elif isinstance(obj, type):
            self._class(obj)
        elif isinstance(obj, functools.partial):
            enc.write_raw(b"P")
            enc.write_callable(obj.func)
            enc.encode(obj.args)
            enc.encode(dict(sorted(obj.keywords.items())))
        elif isinstance(obj, types.MethodType):
            enc.write_raw(b"M")
            enc.write_callable(obj.__func__)
            enc.encode(obj.__self__)
        elif isinstance(obj, _BUILTIN_TYPES):
            self._builtin(obj)
        elif isinstance(obj, np.ufunc):
            self._ufunc(obj)
        elif isinstance(obj, _DESCRIPTOR_TYPES):
            enc.write_raw(b"W")
            enc.write_callable(obj.__objclass__)
            enc.write_name(obj.__name__)
        elif isinstance(obj, (staticmethod, classmethod)):
            enc.write_raw(b"s")
            enc.write_callable(obj.__func__)
        elif isinstance(obj, property):
            enc.write_raw(b"p")
            for f in (obj.fget, obj.fset, obj.fdel):
                enc.write_callable(f) if f is not None else enc.write_raw(b"N")
        elif isinstance(obj, functools.cached_property):
            enc.write_raw(b"q")  # its value cache and lock are not what it computes
            enc.write_callable(obj.func)
        elif type(obj).__name__ in ("cython_function_or_method", "fused_cython_function"):
            self._library_name(obj, getattr(obj, "__module__", None))
        elif _is_delayed_leaf(obj):
            enc.write_raw(b"L")
            enc.write_callable(obj._obj)
            enc.encode((obj._pure, obj._nout))
        else:  # a callable instance: its class and its state
            enc.write_raw(b"I")
            enc.write_reduced(obj)
            # Wrappers pickled by reference (functools.lru_cache) or by the wrapped
            # function's name (toolz.curry) leave out the code they delegate to.
            for inner in _delegates(obj):
                enc.write_callable(inner)

    def _ufunc(self, obj: np.ufunc) -> None:
        """A ufunc by the module it is importable from (numpy, scipy.special) and that
        library's version; one made by ``np.frompyfunc`` hides its Python function."""
        module = getattr(obj, "__module__", None) or pickle.whichmodule(obj, obj.__name__)
        owner = sys.modules.get(module)
        version = library_version(module.partition(".")[0])
        if getattr(owner, obj.__name__, None) is not obj or version is None:
            raise VolatileValue(f"ufunc {obj.__name__!r} is not a library's (np.frompyfunc "
                                "hides its function; np.vectorize does not)")
        self.enc.write_raw(b"u")
        self.enc.write_names((module, obj.__name__, version))

    def _library_name(self, obj: Any, module: str | None) -> None:
        """Compiled code by name and version; compiled user code (an extension module
        outside site-packages) by name and its file's stamp, as it has no bytecode."""
        top = (module or "").partition(".")[0]
        version = library_version(top) if top else None
        self.enc.write_raw(b"B")
        self.enc.write_names((module, _name(obj), version or compiled_stamp(module)))

    def _builtin(self, obj: Any) -> None:
        enc = self.enc
        owner = getattr(obj, "__self__", None)
        if owner is None or isinstance(owner, _MODULE_TYPE):
            self._library_name(obj, getattr(obj, "__module__", None) or getattr(
                owner, "__name__", None))
        elif isinstance(owner, type):  # e.g. dict.fromkeys
            enc.write_raw(b"b")
            enc.write_callable(owner)
            enc.write_name(obj.__name__)
        else:  # a method bound to an instance, e.g. [].append
            enc.write_raw(b"b")
            enc.encode(owner)
            enc.write_name(obj.__name__)

    def _function(self, func: types.FunctionType) -> None:
        """A function by what it does: its code (or the version that stands for it),
        defaults, closure cells, attributes and the globals and modules the code uses.
        Not by the module it lives in: the same function in a script run as
        ``__main__`` and imported in a notebook is the same function. An installed
        package's function is identified by its version where its qualified name leads
        back to it; its lambdas, nested functions and factory products are hashed by their
        code, closures and defaults, plus the version (globals: the version's). The
        standard library's by name and Python version (its closures hold caches)."""
        enc = self.enc
        module = func.__module__
        top = (module or "__main__").partition(".")[0]
        library = library_version(top)
        version = self._version_of(func)
        if library is not None and version is None and (library == PYTHON
                                                         or resolves_to(func)):
            enc.write_raw(b"B")
            enc.write_names((module, func.__qualname__, library))
            wrapped = func.__dict__.get("__wrapped__")
            if wrapped is not None:  # a library decorator around (maybe) user code
                enc.write_callable(wrapped)
            return
        if version is not None:  # the user's version stands for the code and its globals
            enc.write_raw(b"V")
            enc.write_names((script_module_name(module), func.__qualname__, version, library))
        else:
            enc.write_raw(b"U")
            enc.write_names((func.__qualname__, library))
            enc.write_raw(self._code_digest(func.__code__))
        names = code_names(func.__code__, set())
        walked: set[str] = set()
        try:
            enc.encode(func.__defaults__)
            enc.encode(func.__kwdefaults__)
            for cell in func.__closure__ or ():
                try:
                    value = cell.cell_contents
                except ValueError:  # an empty cell
                    enc.write_raw(b"empty")
                    continue
                if isinstance(value, _MODULE_TYPE):  # imported in an enclosing function
                    self._module(value, names, walked)
                else:
                    enc.encode(value)
            attrs = {k: v for k, v in func.__dict__.items() if k != "__cache_version__"}
            if attrs:  # attributes: __wrapped__, singledispatch's registry, ...
                enc.write_raw(b"a")
                enc.encode(dict(sorted(attrs.items())))
            if version is None and library is None:
                self._globals(func, names, walked)
        except VolatileValue as exc:
            raise VolatileValue(f"{_name(func)}: {exc.reason}") from None

    def code_digest(self, code: types.CodeType) -> bytes:
        """The digest of a code object alone (no globals, defaults or closure)."""
        return self._code_digest(code)

    def _code_digest(self, code: types.CodeType) -> bytes:
        hit = self._code_cache.get(id(code))
        if hit is not None:
            return hit[1]
        enc = self.enc
        with enc.sub_digest() as sub:
            # No file name or line numbers: moving a function must not invalidate it.
            enc.write_names((code.co_argcount, code.co_posonlyargcount,
                             code.co_kwonlyargcount, code.co_flags, code.co_names,
                             code.co_varnames, code.co_freevars, code.co_cellvars))
            enc.write_raw(code.co_code)
            enc.write_raw(b"%d:" % len(code.co_exceptiontable) + code.co_exceptiontable)
            for const in code.co_consts:
                if isinstance(const, types.CodeType):
                    enc.write_raw(b"K" + self._code_digest(const))
                else:
                    enc.encode(const)
        self._code_cache[id(code)] = (code, sub.value)
        return sub.value

    def _class(self, cls: type) -> None:
        """A class by its methods and attributes (or the version that stands for them),
        bases and metaclass; a library's class by version unless a function of the
        library made it (``<locals>``: a factory's product). Classes keep their module:
        an instance pickled from a script's ``__main__`` is not an instance of the class
        imported elsewhere."""
        enc = self.enc
        library = library_version((cls.__module__ or "").partition(".")[0])
        version = self._version_of(cls)
        if library is not None and version is None and "<locals>" not in cls.__qualname__:
            enc.write_raw(b"B")
            enc.write_names((cls.__module__, cls.__qualname__, library))
            return
        enc.write_raw(b"C")
        enc.write_names((cls.__module__, cls.__qualname__, library or compiled_stamp(
            cls.__module__)))
        for base in cls.__bases__:
            enc.write_callable(base)
        if type(cls) is not type:  # a metaclass can change what the class does
            enc.write_callable(type(cls))
        if version is not None:  # the user's version stands for the class body
            enc.write_raw(b"V")
            enc.write_name(version)
            return
        try:
            for name, attr in sorted(vars(cls).items()):
                if name in _IGNORED_CLASS_ATTRS:
                    continue
                enc.write_name(name)
                if isinstance(attr, (staticmethod, classmethod, property,
                                     functools.cached_property)):
                    enc.write_callable(attr)
                else:
                    enc.encode(attr)
        except VolatileValue as exc:
            raise VolatileValue(f"class {cls.__qualname__}: {exc.reason}") from None

    # -- the names a function's code reads ----------------------------------------------------

    def _globals(self, func: types.FunctionType, names: set[str], walked: set[str]) -> None:
        """The module-level names the code may read, with their current values, and
        the modules it imports in its body."""
        glb = func.__globals__
        for name in sorted(names):
            if name in glb:
                self._named_value(name, glb[name], names, walked)
        for name, level in code_imports(func.__code__):
            self.enc.write_raw(b"import")
            self._module(imported_module(func, name, level), names, walked)

    def _module(self, module: types.ModuleType | str, names: set[str],
                walked: set[str]) -> None:
        """A module the code references: a library by version, user code by the
        attributes of it that the code names (``mymod.helper(x)``, ``pkg.sub.helper``),
        each user module once per function."""
        name = module if isinstance(module, str) else module.__name__
        version = library_version(name.partition(".")[0])
        self.enc.write_raw(b"m")
        self.enc.write_names((name, version))
        if version is not None or isinstance(module, str):
            return
        if name in walked:
            return
        walked.add(name)
        attrs = vars(module)
        for attr in sorted(names):
            if attr in attrs and not attr.startswith("__"):
                self._named_value(attr, attrs[attr], names, walked)

    def _named_value(self, name: str, value: Any, names: set[str], walked: set[str]) -> None:
        """A global or module attribute the code names: modules are walked for the names
        the code uses, everything else is encoded by value."""
        self.enc.write_name(name)
        if isinstance(value, _MODULE_TYPE):
            self._module(value, names, walked)
        else:
            self.enc.encode(value)


def _version_targets(obj: Any) -> list[Any]:
    """The functions and classes whose code an annotated version replaces: the task's
    function, through partials, bound methods, ``dask.delayed`` and wrappers, or the
    class of a callable instance."""
    found: list[Any] = []
    for _ in range(16):
        if isinstance(obj, (types.FunctionType, type)):
            found.append(obj)
            inner = obj.__dict__.get("__wrapped__") if hasattr(obj, "__dict__") else None
        elif isinstance(obj, functools.partial):
            inner = obj.func
        elif isinstance(obj, types.MethodType):
            inner = obj.__func__
        elif _is_delayed_leaf(obj):
            inner = obj._obj
        elif callable(obj) and not isinstance(obj, _BUILTIN_TYPES):
            found.append(type(obj))
            inner = next(iter(_delegates(obj)), None)
        else:
            inner = None
        if inner is None:
            break
        obj = inner
    return found


def _name(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(
        obj).__qualname__


def _delegates(obj: Any) -> list[Any]:
    """The callables a wrapper object hands its calls to: ``__wrapped__`` (set by
    ``functools.update_wrapper``) and a partial-like ``func`` (``toolz.curry``)."""
    found = []
    wrapped = getattr(obj, "__dict__", {}).get("__wrapped__")
    if wrapped is not None:
        found.append(wrapped)
    if any("func" in vars(klass) for klass in type(obj).__mro__[:-1]):
        try:
            func = obj.func
        except Exception:
            func = None
        if callable(func):
            found.append(func)
    return found


def _is_delayed_leaf(obj: Any) -> bool:
    return type(obj).__name__ == "DelayedLeaf" and hasattr(obj, "_obj")
