"""Function fingerprints: what a callable computes, independent of where it lives in memory.

User code (any module whose file is not under site-packages and not in the standard
library, whatever its name) is identified by its code: bytecode, constants (nested code
recursively), names, defaults, keyword defaults, closure cells, function attributes
(``__wrapped__``, a singledispatch registry), the module-level globals the code references
(functions recursively with a cycle guard, classes by their methods and attributes,
constants by value, user modules and packages by the attributes the code names) and the
modules it imports in its body. Library code is identified by module, qualname and the
installed version of its distribution, so an upgrade invalidates it; a distribution built
from a local checkout (``pip install .``) also by its installed files. Wrappers count what
they wrap (``functools.lru_cache``, ``toolz.curry``). DESIGN.md section 2, and
docs/correctness.md for what is not seen.
"""

from __future__ import annotations

import dis
import functools
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import pickle
import sys
import sysconfig
import types
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from .errors import VolatileValue
from .normalize import ValueEncoder, file_stamp

__all__ = ["Fingerprinter", "cache_version", "library_version"]

_xxh3 = xxhash.xxh3_128_digest

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

_PYTHON = f"python-{sys.version_info[0]}.{sys.version_info[1]}"
_MODULE_TYPE = types.ModuleType
_FUNCTION_TYPES = (types.FunctionType,)
_BUILTIN_TYPES = (types.BuiltinFunctionType, types.BuiltinMethodType)
_DESCRIPTOR_TYPES = (
    types.MethodDescriptorType, types.WrapperDescriptorType, types.MethodWrapperType,
    types.ClassMethodDescriptorType, types.GetSetDescriptorType,
    types.MemberDescriptorType,
)


def cache_version(version: str | int):
    """Decorator: identify a function by ``version`` instead of by its code.

    For users who want manual control: editing the function no longer invalidates its
    cached results; changing ``version`` does. Works under ``@dask.delayed`` too::

        @dask.delayed
        @cache_version("2")
        def load(path): ...
    """

    def decorate(func):
        target = getattr(func, "_obj", func)  # a dask.delayed-wrapped function
        target.__cache_version__ = str(version)
        return func

    return decorate


@functools.cache
def _site_dirs() -> tuple[str, ...]:
    paths = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    return tuple(os.path.realpath(p) + os.sep for p in paths)


@functools.cache
def _stdlib_dirs() -> tuple[str, ...]:
    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}
    return tuple(os.path.realpath(p) + os.sep for p in paths)


@functools.cache
def _installed_versions() -> dict[str, tuple[str, str]]:
    """Normalised distribution name -> (version, ``*.dist-info`` path), from the directory
    names in site-packages (a directory listing: far cheaper than scanning every
    distribution's metadata, which costs tens of milliseconds per process)."""
    versions: dict[str, tuple[str, str]] = {}
    for site_dir in _site_dirs():
        try:
            names = os.listdir(site_dir)
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                dist, _, version = name[: -len(".dist-info")].rpartition("-")
                versions.setdefault(_normalise(dist), (version, os.path.join(site_dir, name)))
    return versions


def _normalise(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distribution_version(top_module: str) -> str | None:
    installed = _installed_versions().get(_normalise(top_module))
    if installed is not None:
        version, info = installed
        dist = importlib.metadata.PathDistribution(Path(info))
        return f"{top_module}=={version}" + _local_build(dist, top_module)
    dists = _distributions().get(top_module)  # modules named unlike their distribution
    if dists:
        name = sorted(dists)[0]
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            return None
        return f"{name}=={dist.version}" + _local_build(dist, top_module)
    return None


def _local_build(dist: importlib.metadata.Distribution, top_module: str) -> str:
    """``""`` for a release; for a distribution installed from a local directory, archive
    or VCS checkout (it has a PEP 610 ``direct_url.json``: ``pip install .``), a digest of
    the installer's record of the package's files. Such builds are reinstalled again and
    again under one version number (a project's own code in a Docker image), so the
    version alone does not say which code is installed."""
    try:
        if dist.read_text("direct_url.json") is None:
            return ""
        record = dist.read_text("RECORD") or ""
    except OSError:
        return "+local:unreadable"
    prefixes = (f"{top_module}/", f"{top_module}.py,")
    lines = sorted(line for line in record.splitlines()
                   if line.startswith(prefixes) and "/__pycache__/" not in line)
    return "+local:" + xxhash.xxh3_128_hexdigest("\n".join(lines).encode())


@functools.cache
def library_version(top_module: str) -> str | None:
    """How a library identifies itself in a fingerprint, or ``None`` for user code.

    ``numpy`` -> ``"numpy==2.4.6"``; the standard library -> ``"python-3.11"``; a module
    outside site-packages and the standard library (scripts, notebooks, editable
    checkouts of the user's own packages) -> ``None``: it is hashed by its code.
    """
    if top_module in sys.builtin_module_names:
        return _PYTHON
    if top_module == "__main__":
        return None
    file = _module_file(top_module)
    if file is None:  # frozen or built in, or not importable at all
        return _PYTHON if top_module in sys.stdlib_module_names else None
    # By location, not by name: a user's own ``wave.py`` or ``code.py`` is user code.
    path = os.path.realpath(file)
    if path.startswith(_stdlib_dirs()) and not path.startswith(_site_dirs()):
        return _PYTHON
    in_site = path.startswith(_site_dirs()) or (
        f"{os.sep}site-packages{os.sep}" in path or f"{os.sep}dist-packages{os.sep}" in path
    )
    if not in_site:
        return None
    version = _distribution_version(top_module)
    if version is not None:
        return version
    st = os.stat(path)  # an undeclared module: its file stands in for a version
    return f"{top_module}@{st.st_size}:{st.st_mtime_ns}"


def _module_file(top_module: str) -> str | None:
    """Where a top-level module lives: from ``sys.modules``, else found on ``sys.path``
    without importing it (a module imported only inside a task body)."""
    mod = sys.modules.get(top_module)
    if mod is not None:
        file = getattr(mod, "__file__", None)
        paths = list(getattr(mod, "__path__", []) or [])
        return file or (paths[0] if paths else None)
    try:
        spec = importlib.util.find_spec(top_module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.has_location and spec.origin:
        return spec.origin
    locations = list(spec.submodule_search_locations or [])
    return locations[0] if locations else None


_IMPORT_NAME = bytes([dis.opmap["IMPORT_NAME"]])


@functools.lru_cache(maxsize=4096)
def _code_imports(code: types.CodeType) -> tuple[tuple[str, int], ...]:
    """``(module name, level)`` of every ``import`` statement in ``code`` and the code
    nested in it; level ``-1`` when the bytecode is not the expected shape."""
    found: list[tuple[str, int]] = []
    if _IMPORT_NAME in code.co_code[::2]:  # code units are (opcode, argument) pairs
        instructions = list(dis.get_instructions(code))
        for i, ins in enumerate(instructions):
            if ins.opname == "IMPORT_NAME":
                level = instructions[i - 2].argval if i >= 2 else None
                found.append((ins.argval, level if isinstance(level, int) else -1))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.extend(_code_imports(const))
    return tuple(found)


def _code_names(code: types.CodeType, names: set[str]) -> set[str]:
    names.update(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_names(const, names)
    return names


class Fingerprinter:
    """Computes 16-byte fingerprints of callables and classes.

    One instance per hashing pass: it caches by object identity and keeps the objects
    alive, so an id cannot be reused while the cache holds it. Globals are read at hash
    time, so a module constant mutated between two passes is seen. Not thread safe.
    """

    def __init__(self, encoder: ValueEncoder) -> None:
        self.enc = encoder
        encoder.encode_callable = self.encode_callable
        encoder.encode_module = self._module_value
        self._modules: list[str] = []  # user modules being encoded as values
        self._cache: dict[int, tuple[Any, bytes]] = {}
        self._code_cache: dict[int, tuple[types.CodeType, bytes]] = {}
        self._stack: list[int] = []
        self._tainted: list[bool] = []

    # -- entry points -------------------------------------------------------------------

    def encode_callable(self, obj: Any) -> None:
        self.enc.out.append(b"F" + self.digest(obj))

    def digest(self, obj: Any) -> bytes:
        """The fingerprint of a callable or class; raises :class:`VolatileValue`."""
        oid = id(obj)
        hit = self._cache.get(oid)
        if hit is not None:
            return hit[1]
        if oid in self._stack:
            # A cycle: refer to the function by name. Every frame above it depends on
            # this, so their fingerprints are not cached (their value depends on where
            # the walk started); the frame of ``obj`` itself is canonical.
            pos = self._stack.index(oid)
            for i in range(pos + 1, len(self._tainted)):
                self._tainted[i] = True
            return _xxh3(b"cycle\0" + _name(obj).encode())
        self._stack.append(oid)
        self._tainted.append(False)
        saved, self.enc.out = self.enc.out, []
        try:
            self._describe(obj)
            value = _xxh3(b"".join(self.enc.out))
        finally:
            self.enc.out = saved
            self._stack.pop()
            tainted = self._tainted.pop()
        if not tainted:
            self._cache[oid] = (obj, value)
        return value

    # -- dispatch -----------------------------------------------------------------------

    def _describe(self, obj: Any) -> None:
        out = self.enc.out
        version = getattr(obj, "__cache_version__", None)
        if isinstance(version, str) and not isinstance(obj, type):
            out.append(b"V")
            self.enc.encode((getattr(obj, "__module__", None), _name(obj), version))
        elif isinstance(obj, _FUNCTION_TYPES):
            self._function(obj)
        elif isinstance(obj, type):
            self._class(obj)
        elif isinstance(obj, functools.partial):
            out.append(b"P")
            self.encode_callable(obj.func)
            self.enc.encode(obj.args)
            self.enc.encode(dict(sorted(obj.keywords.items())))
        elif isinstance(obj, types.MethodType):
            out.append(b"M")
            self.encode_callable(obj.__func__)
            self.enc.encode(obj.__self__)
        elif isinstance(obj, _BUILTIN_TYPES):
            self._builtin(obj)
        elif isinstance(obj, np.ufunc):
            self._ufunc(obj)
        elif isinstance(obj, _DESCRIPTOR_TYPES):
            out.append(b"W")
            self.encode_callable(obj.__objclass__)
            self.enc.encode(obj.__name__)
        elif isinstance(obj, (staticmethod, classmethod)):
            out.append(b"s")
            self.encode_callable(obj.__func__)
        elif isinstance(obj, property):
            out.append(b"p")
            for f in (obj.fget, obj.fset, obj.fdel):
                self.encode_callable(f) if f is not None else out.append(b"N")
        elif isinstance(obj, functools.cached_property):
            out.append(b"q")  # its value cache and lock are not what it computes
            self.encode_callable(obj.func)
        elif type(obj).__name__ in ("cython_function_or_method", "fused_cython_function"):
            self._library_name(obj, getattr(obj, "__module__", None))
        elif _is_delayed_leaf(obj):
            out.append(b"L")
            self.encode_callable(obj._obj)
            self.enc.encode((obj._pure, obj._nout))
        else:  # a callable instance: its class and its state
            out.append(b"I")
            self.enc._encode_reduced(obj)
            # Wrappers pickled by reference (functools.lru_cache) or by the wrapped
            # function's name (toolz.curry) leave out the code they delegate to.
            for inner in _delegates(obj):
                self.encode_callable(inner)

    def _ufunc(self, obj: np.ufunc) -> None:
        """A ufunc by the module it is importable from (numpy, scipy.special) and that
        library's version; one made by ``np.frompyfunc`` hides its Python function."""
        module = getattr(obj, "__module__", None) or pickle.whichmodule(obj, obj.__name__)
        owner = sys.modules.get(module)
        version = library_version(module.partition(".")[0])
        if getattr(owner, obj.__name__, None) is not obj or version is None:
            raise VolatileValue(f"ufunc {obj.__name__!r} is not a library's (np.frompyfunc "
                                "hides its function; np.vectorize does not)")
        self.enc.out.append(b"u")
        self.enc.encode((module, obj.__name__, version))

    def _library_name(self, obj: Any, module: str | None) -> None:
        """Compiled code by name and version; compiled user code (an extension module
        outside site-packages) by name and its file's stamp, as it has no bytecode."""
        top = (module or "").partition(".")[0]
        version = library_version(top) if top else None
        self.enc.out.append(b"B")
        self.enc.encode((module, _name(obj), version or _compiled_stamp(module)))

    def _builtin(self, obj: Any) -> None:
        owner = getattr(obj, "__self__", None)
        if owner is None or isinstance(owner, _MODULE_TYPE):
            self._library_name(obj, getattr(obj, "__module__", None) or getattr(
                owner, "__name__", None))
        elif isinstance(owner, type):  # e.g. dict.fromkeys
            self.enc.out.append(b"b")
            self.encode_callable(owner)
            self.enc.encode(obj.__name__)
        else:  # a method bound to an instance, e.g. [].append
            self.enc.out.append(b"b")
            self.enc.encode(owner)
            self.enc.encode(obj.__name__)

    def _function(self, func: types.FunctionType) -> None:
        module = func.__module__
        top = (module or "__main__").partition(".")[0]
        version = library_version(top)
        if version is not None:
            self.enc.out.append(b"B")
            self.enc.encode((module, func.__qualname__, version))
            wrapped = func.__dict__.get("__wrapped__")
            if wrapped is not None:  # a library decorator around (maybe) user code
                self.encode_callable(wrapped)
            return
        enc = self.enc
        enc.out.append(b"U")
        enc.encode((module, func.__qualname__))
        enc.out.append(self._code_digest(func.__code__))
        names = _code_names(func.__code__, set())
        walked: set[str] = set()
        try:
            enc.encode(func.__defaults__)
            enc.encode(func.__kwdefaults__)
            for cell in func.__closure__ or ():
                try:
                    value = cell.cell_contents
                except ValueError:  # an empty cell
                    enc.out.append(b"empty")
                    continue
                if isinstance(value, _MODULE_TYPE):  # imported in an enclosing function
                    self._module(value, names, walked)
                else:
                    enc.encode(value)
            if func.__dict__:  # attributes: __wrapped__, singledispatch's registry, ...
                enc.out.append(b"a")
                enc.encode(dict(sorted(func.__dict__.items())))
            self._globals(func, names, walked)
        except VolatileValue as exc:
            raise VolatileValue(f"{_name(func)}: {exc.reason}") from None

    def _globals(self, func: types.FunctionType, names: set[str], walked: set[str]) -> None:
        """The module-level names the code may read, with their current values, and
        the modules it imports in its body."""
        enc = self.enc
        glb = func.__globals__
        for name in sorted(names):
            if name in glb:
                self._named_value(name, glb[name], names, walked)
        for name, level in _code_imports(func.__code__):
            enc.out.append(b"import")
            self._module(self._imported(func, name, level), names, walked)

    def _imported(self, func: types.FunctionType, name: str,
                  level: int) -> types.ModuleType | str:
        """The module an ``import`` in ``func``'s body names, imported now if it is user
        code (the task imports it when it runs anyway); a library's name if it is not
        imported yet (its version is all that counts)."""
        if level < 0:
            raise VolatileValue(f"unexpected bytecode around an import of {name!r}")
        if level:
            package = func.__globals__.get("__package__") or ""
            try:
                name = importlib.util.resolve_name("." * level + name, package)
            except (ImportError, ValueError) as exc:
                raise VolatileValue(f"cannot resolve a relative import: {exc}") from None
        module = sys.modules.get(name)
        if module is not None:
            return module
        if library_version(name.partition(".")[0]) is not None:
            return name
        try:
            return importlib.import_module(name)
        except Exception as exc:
            raise VolatileValue(f"cannot import {name!r} to fingerprint the code that "
                                f"imports it ({type(exc).__name__}: {exc})") from None

    def _module(self, module: types.ModuleType | str, names: set[str],
                walked: set[str]) -> None:
        """A module the code references: a library by version, user code by the
        attributes of it that the code names (``mymod.helper(x)``, ``pkg.sub.helper``),
        each user module once per function."""
        enc = self.enc
        name = module if isinstance(module, str) else module.__name__
        version = library_version(name.partition(".")[0])
        enc.out.append(b"m")
        enc.encode((name, version))
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
        self.enc.encode(name)
        if isinstance(value, _MODULE_TYPE):
            self._module(value, names, walked)
        else:
            self.enc.encode(value)

    def _module_value(self, module: types.ModuleType) -> None:
        """A module held as a value (an argument, a class attribute): a library by
        version, a user module by all its attributes."""
        enc = self.enc
        name = module.__name__
        version = library_version(name.partition(".")[0])
        enc.out.append(b"m")
        enc.encode((name, version))
        if version is not None:
            return
        if name in self._modules:  # a cycle through module attributes
            enc.out.append(b"@%d;" % self._modules.index(name))
            return
        self._modules.append(name)
        try:
            for attr, value in sorted(vars(module).items()):
                if not attr.startswith("__"):
                    enc.encode(attr)
                    enc.encode(value)
        finally:
            self._modules.pop()

    def _code_digest(self, code: types.CodeType) -> bytes:
        hit = self._code_cache.get(id(code))
        if hit is not None:
            return hit[1]
        saved, self.enc.out = self.enc.out, []
        enc = self.enc
        try:
            # No file name or line numbers: moving a function must not invalidate it.
            enc.encode((code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
                        code.co_flags, code.co_names, code.co_varnames, code.co_freevars,
                        code.co_cellvars))
            enc.out.append(code.co_code)
            enc.out.append(b"%d:" % len(code.co_exceptiontable) + code.co_exceptiontable)
            for const in code.co_consts:
                if isinstance(const, types.CodeType):
                    enc.out.append(b"K" + self._code_digest(const))
                else:
                    enc.encode(const)
            value = _xxh3(b"".join(enc.out))
        finally:
            self.enc.out = saved
        self._code_cache[id(code)] = (code, value)
        return value

    def _class(self, cls: type) -> None:
        enc = self.enc
        version = library_version((cls.__module__ or "").partition(".")[0])
        if version is not None:
            enc.out.append(b"B")
            enc.encode((cls.__module__, cls.__qualname__, version))
            return
        enc.out.append(b"C")
        enc.encode((cls.__module__, cls.__qualname__, _compiled_stamp(cls.__module__)))
        for base in cls.__bases__:
            self.encode_callable(base)
        if type(cls) is not type:  # a metaclass can change what the class does
            self.encode_callable(type(cls))
        try:
            for name, attr in sorted(vars(cls).items()):
                if name in _IGNORED_CLASS_ATTRS:
                    continue
                enc.encode(name)
                if isinstance(attr, (staticmethod, classmethod, property,
                                     functools.cached_property)):
                    self.encode_callable(attr)
                else:
                    enc.encode(attr)
        except VolatileValue as exc:
            raise VolatileValue(f"class {cls.__qualname__}: {exc.reason}") from None


def _compiled_stamp(module: str | None) -> str | None:
    """``size:mtime`` of a compiled extension module's file (rebuilding it changes the
    stamp), ``None`` for Python modules; its code cannot be hashed any other way."""
    file = getattr(sys.modules.get(module or ""), "__file__", None) or ""
    if not file.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
        return None
    stamp = file_stamp(file)
    if stamp is None:
        raise VolatileValue(f"compiled module {module!r} cannot be stat'ed")
    return stamp.decode()


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
