"""Handlers for standard-library types that are not built-in containers or scalars:
enums, modules, paths, UUIDs, decimals, fractions, dates, times and code objects."""

from __future__ import annotations

import datetime
import decimal
import enum
import fractions
import pathlib
import types
import uuid
from typing import TYPE_CHECKING, Any

from ..errors import VolatileValue
from .provenance import file_stamp
from .registry import HANDLERS

if TYPE_CHECKING:
    from .encoder import Encoder

__all__: list[str] = []


@HANDLERS.register(enum.Enum)
def _enum(enc: Encoder, obj: enum.Enum) -> None:
    enc.write_raw(b"e")
    enc.write_callable(type(obj))
    enc.write_name(obj.name)
    enc.encode(obj._value_)  # the class fingerprint walks members only by name


@HANDLERS.register(types.ModuleType)
def _module(enc: Encoder, obj: types.ModuleType) -> None:
    enc.write_module(obj)  # the fingerprints know libraries from user code


@HANDLERS.register(pathlib.PurePath)
def _path(enc: Encoder, obj: pathlib.PurePath) -> None:
    enc.write_raw(b"p")
    enc.write_callable(type(obj))
    enc.write_str(str(obj))
    stamp = file_stamp(str(obj))
    if stamp is not None:
        enc.write_raw(b"@file" + stamp)


@HANDLERS.register(uuid.UUID, decimal.Decimal, fractions.Fraction)
def _by_str(enc: Encoder, obj: Any) -> None:
    # Types whose str() is their complete, canonical value.
    enc.write_raw(b"x")
    enc.write_callable(type(obj))
    enc.write_name(str(obj))


@HANDLERS.register(datetime.datetime, datetime.date, datetime.time)
def _datetime(enc: Encoder, obj: Any) -> None:
    enc.write_raw(b"t")
    enc.write_callable(type(obj))
    enc.write_name(obj.isoformat())
    enc.encode(getattr(obj, "fold", 0))


@HANDLERS.register(datetime.timedelta)
def _timedelta(enc: Encoder, obj: datetime.timedelta) -> None:
    enc.write_raw(b"t%d,%d,%d;" % (obj.days, obj.seconds, obj.microseconds))


@HANDLERS.register(types.CodeType)
def _code(enc: Encoder, obj: types.CodeType) -> None:
    raise VolatileValue("bare code objects are not hashed")
