"""Handlers for standard-library types that are not built-in containers or scalars:
enums, modules, paths, UUIDs, decimals, fractions, dates, times (and pandas' subclasses:
their unit and nanoseconds; zones by identity) and code objects; ``random.Random``
generators are volatile (every draw advances them)."""

from __future__ import annotations

import datetime
import decimal
import enum
import fractions
import pathlib
import random
import types
import uuid
from typing import TYPE_CHECKING, Any

from ..core.errors import VolatileValue
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
    enc.write_name(obj.isoformat())  # pandas' Timestamp: with its nanoseconds
    enc.encode(getattr(obj, "fold", 0))
    enc.encode(getattr(obj, "unit", None))  # pandas: "s" and "ns" compute differently
    tz = getattr(obj, "tzinfo", None)
    if tz is not None:
        _tzinfo(enc, tz)


def _tzinfo(enc: Encoder, tz: Any) -> None:
    """A time zone by identity, not by its offset at one instant: UTC and London agree
    in January and not in July."""
    enc.write_raw(b"z")
    key = getattr(tz, "key", None)
    if isinstance(key, str) and type(tz).__module__ == "zoneinfo":
        enc.write_names(("zoneinfo", key))  # not its pickled state: that says if cached
    else:  # datetime.timezone (offset and name), pytz, dateutil (file, rules): by state
        enc.encode(tz)


@HANDLERS.register(datetime.timedelta)
def _timedelta(enc: Encoder, obj: datetime.timedelta) -> None:
    enc.write_raw(b"t%d,%d,%d;" % (obj.days, obj.seconds, obj.microseconds))
    if type(obj) is not datetime.timedelta:  # pandas' Timedelta: nanoseconds and unit
        enc.write_callable(type(obj))
        enc.encode((getattr(obj, "value", None), getattr(obj, "unit", None)))


@HANDLERS.register(random.Random)
def _random(enc: Encoder, obj: random.Random) -> None:
    # Every draw advances it: what a task draws depends on the draws before.
    raise VolatileValue(f"a random generator ({type(obj).__module__}."
                        f"{type(obj).__qualname__}) is advanced by every draw from it")


@HANDLERS.register(types.CodeType)
def _code(enc: Encoder, obj: types.CodeType) -> None:
    raise VolatileValue("bare code objects are not hashed")
