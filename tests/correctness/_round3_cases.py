"""Cases of correctness round 3 (issue 27). Cases 1 to 4: two argument values that are not
the same value, and a first task that tells them apart, so a hash that confuses them
serves a stale result after the edit. Case 11: an edit a version stands for, which must
recompute nothing.

Part of the catalogue in :mod:`tests.correctness._mutations` (which appends them), so
they run cold, warm and edited in fresh processes (``test_mutations.py``) and at the
hash level in-process (``tests/client/test_hashing.py``). Each case names the case of
issue 27 it reproduces; the unnumbered ones are siblings of a numbered class. Test-side
only: nothing here imports client_lib.
"""

from __future__ import annotations

from tests.correctness._projects import Case, array_pipe, delayed_case

__all__ = ["CASES"]

PANDAS = "import pandas as pd\nimport pyarrow as pa"
TYPES = "return [type(v).__name__ for v in x]"
SIGN = "return float(np.copysign(1.0, float(x.iloc[0])))"
ARROW_F64 = "dtype=pd.ArrowDtype(pa.float64())"
DUPLICATES = '''\
try:
    pd.concat([x, x])
    return "allowed"
except Exception as exc:
    return type(exc).__name__'''
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


def documented(doc: str) -> str:
    """An array project whose ``map_blocks`` layer is annotated with a cache version."""
    return array_pipe("""
        base = da.from_array(np.arange(60.0).reshape(30, 2), chunks=(10, 2))
        with dask.annotate(cache_version="1"):
            x = base.map_blocks(scale)
    """, header=f"""

def scale(block):
    \"\"\"{doc}\"\"\"
    return block * 2
""")


def value_case(name: str, before: str, after: str, body: str, header: str = PANDAS,
               prepare: str = "pass") -> Case:
    """``step_a(before)`` edited into ``step_a(after)``: everything recomputes (``b``
    and ``c`` take any value ``step_a`` returns)."""
    shape = {"header": header, "a_body": body, "prepare": prepare, "defs": TAKES_ANY,
             "c_body": "return repr(x)"}
    return delayed_case(name, {**shape, "arg": before}, {**shape, "arg": after},
                        recompute=frozenset({"a", "b", "c"}))


CASES: list[Case] = [
    # 1. Categorical and extension data by their exact buffers.
    value_case("categorical with mixed-type categories (1)",
               "pd.Series(pd.Categorical([1, '1', 1]))",
               "pd.Series(pd.Categorical(['1', 1, '1']))", TYPES),
    value_case("CategoricalIndex with mixed-type categories (1)",
               "pd.DataFrame({'v': [1, 2, 3]}, index=pd.CategoricalIndex([1, '1', 1]))",
               "pd.DataFrame({'v': [1, 2, 3]}, index=pd.CategoricalIndex(['1', 1, '1']))",
               "return [type(v).__name__ for v in x.index]"),
    value_case("-0.0 in a nullable Float64 column (1)",
               "pd.Series([0.0, 1.0], dtype='Float64')",
               "pd.Series([-0.0, 1.0], dtype='Float64')", SIGN),
    value_case("-0.0 in an ArrowDtype(pa.float64()) column (1)",
               f"pd.Series([0.0, 1.0], {ARROW_F64})",
               f"pd.Series([-0.0, 1.0], {ARROW_F64})", SIGN),
    value_case("-0.0 in interval breaks (1)",
               "pd.Series(pd.IntervalIndex.from_breaks([0.0, 1.0]))",
               "pd.Series(pd.IntervalIndex.from_breaks([-0.0, 1.0]))",
               "return float(np.copysign(1.0, x.iloc[0].left))"),
    value_case("NaN vs null in an Arrow float column (1)",
               "pd.Series(pd.arrays.ArrowExtensionArray(pa.array([np.nan, 1.0], "
               "from_pandas=False)))",
               "pd.Series(pd.arrays.ArrowExtensionArray(pa.array([None, 1.0])))",
               "return int(x.isna().sum())"),
    value_case("NaN vs NA in a nullable Float64 column",
               "pd.Series(pd.arrays.FloatingArray(np.array([np.nan, 1.0]), "
               "np.array([False, False])))",
               "pd.Series(pd.arrays.FloatingArray(np.array([np.nan, 1.0]), "
               "np.array([True, False])))",
               "return int(x.isna().sum())"),
    value_case("-0.0 stored in a sparse column",
               "pd.Series(pd.arrays.SparseArray([0.0, 1.0], fill_value=np.nan))",
               "pd.Series(pd.arrays.SparseArray([-0.0, 1.0], fill_value=np.nan))", SIGN),
    # 2. Element types by position.
    value_case("object Series: which element is an np.str_ (2)",
               "pd.Series([np.str_('a'), 'b'], dtype=object)",
               "pd.Series(['a', np.str_('b')], dtype=object)", TYPES),
    # 3. State the encoders never saw.
    value_case("DataFrame.flags (3)",
               "pd.DataFrame({'a': [1, 2]})",
               "pd.DataFrame({'a': [1, 2]}).set_flags(allows_duplicate_labels=False)",
               DUPLICATES),
    value_case("Series.flags",
               "pd.Series([1, 2])",
               "pd.Series([1, 2]).set_flags(allows_duplicate_labels=False)", DUPLICATES),
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
    # 11. An annotated version stands for the code of an array layer's function: Dask's
    # blockwise fusion drops the annotation from the layers it fuses.
    Case("docstring edit under dask.annotate(cache_version) on map_blocks (11)",
         {"pipe.py": documented("Doubles.")}, {"pipe.py": documented("Twice the block.")},
         recompute=frozenset(), same_result=True),
]
