"""Value cases of correctness round 3 (issue 27, cases 3 and 4): two argument values that
are not the same value, and a first task that tells them apart, so a hash that confuses
them serves a stale result after the edit.

Part of the catalogue in :mod:`tests.correctness._mutations` (which appends them), so
they run cold, warm and edited in fresh processes (``test_mutations.py``) and at the
hash level in-process (``tests/client/test_hashing.py``). Each case names the case of
issue 27 it reproduces; the unnumbered ones are siblings of a numbered class. Test-side
only: nothing here imports client_lib.
"""

from __future__ import annotations

from tests.correctness._projects import Case, delayed_case

__all__ = ["CASES"]

ASSIGN_UNDER_MASK = "y = x.copy()\ny[1] = 5\nreturn int(np.ma.count_masked(y))"
MASKED = "np.ma.masked_array([1, 2, 3], mask=[0, 1, 0])"
TAKES_ANY = "def step_b(x):\n    return (x, x)"
TAGGED = """\
class Tagged(np.ndarray):
    pass


def tagged(unit):
    arr = np.arange(3.0).view(Tagged)
    arr.unit = unit
    return arr"""
NDITER = "return [float(v) for v in np.nditer(x)]"


def value_case(name: str, before: str, after: str, body: str, header: str = "",
               prepare: str = "pass") -> Case:
    """``step_a(before)`` edited into ``step_a(after)``: everything recomputes (``b``
    and ``c`` take any value ``step_a`` returns)."""
    shape = {"header": header, "a_body": body, "prepare": prepare, "defs": TAKES_ANY,
             "c_body": "return repr(x)"}
    return delayed_case(name, {**shape, "arg": before}, {**shape, "arg": after},
                        recompute=frozenset({"a", "b", "c"}))


CASES: list[Case] = [
    # 3. State the encoders never saw.
    value_case("dtype.metadata (3)",
               "np.zeros(3, dtype=np.dtype(np.float64, metadata={'unit': 'm'}))",
               "np.zeros(3, dtype=np.dtype(np.float64, metadata={'unit': 'km'}))",
               "return x.dtype.metadata['unit']", header=""),
    value_case("MaskedArray.hardmask (3)", MASKED, f"{MASKED}.harden_mask()",
               ASSIGN_UNDER_MASK, header=""),
    value_case("memoryview format (3)",
               "memoryview(np.arange(4, dtype=np.int32))",
               "memoryview(np.arange(4, dtype=np.int32).view(np.float32))",
               "return x.tolist()", header=""),
    value_case("memoryview shape (3)",
               "memoryview(np.arange(6, dtype=np.int32).reshape(2, 3))",
               "memoryview(np.arange(6, dtype=np.int32).reshape(3, 2))",
               "return x.tolist()", header=""),
    value_case("an attribute of an ndarray subclass instance",
               "tagged('m')", "tagged('km')", "return x.unit", header=TAGGED),
    value_case("bytearray vs bytes",
               "b'abc'", "bytearray(b'abc')", "return type(x + b'd').__name__", header=""),
    # 4. Memory order, for layout-dependent code.
    value_case("C-ordered vs F-ordered array (4)",
               "np.arange(6.0).reshape(2, 3)",
               "np.asfortranarray(np.arange(6.0).reshape(2, 3))", NDITER, header=""),
    value_case("reversed view vs its copy",
               "np.arange(6.0)[::-1].copy()", "np.arange(6.0)[::-1]", NDITER, header=""),
]
