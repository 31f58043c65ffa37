"""What a function's code names and imports, read from its bytecode: the globals and
module attributes a fingerprint follows, and the modules imported in the function body."""

from __future__ import annotations

import dis
import functools
import importlib
import importlib.util
import sys
import types

from ..core.errors import VolatileValue
from .provenance import library_version

__all__ = ["code_imports", "code_names", "imported_module"]

_IMPORT_NAME = bytes([dis.opmap["IMPORT_NAME"]])


def imported_module(func: types.FunctionType, name: str, level: int) -> types.ModuleType | str:
    """The module an ``import`` in ``func``'s body names, imported now if it is user code
    (the task imports it when it runs anyway); a library's name if it is not imported yet
    (its version is all that counts)."""
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


@functools.lru_cache(maxsize=4096)
def code_imports(code: types.CodeType) -> tuple[tuple[str, int], ...]:
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
            found.extend(code_imports(const))
    return tuple(found)


_ATTRIBUTE_CALLS = frozenset({"getattr", "hasattr", "attrgetter", "methodcaller"})


def code_names(code: types.CodeType, names: set[str]) -> set[str]:
    """The names ``code`` (and the code nested in it) uses; with ``getattr(x, "NAME")``
    (or ``hasattr``, ``attrgetter("a.b")``, ``methodcaller``) the literal names too."""
    names.update(code.co_names)
    by_literal = not _ATTRIBUTE_CALLS.isdisjoint(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            code_names(const, names)
        elif by_literal and isinstance(const, str):
            names.update(p for p in const.split(".") if p.isidentifier())
    return names
