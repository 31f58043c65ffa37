"""Code-edit cases of correctness round 2 (issue 10): value hashing, versions, paths, IO.

Part of the catalogue in :mod:`tests.correctness._mutations` (which appends them), so
they run cold, warm and edited in fresh processes (``test_mutations.py``) and at the
hash level in-process (``tests/client/test_hashing.py``). Each case names the item of
issue 10 it reproduces. Test-side only: nothing here imports client_lib.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np

from tests.correctness._projects import SIDE, Case, delayed_case

__all__ = ["CASES"]

# -- inputs for the path cases ----------------------------------------------------------


def _write_listed_files(directory: Path) -> None:
    (directory / "data").mkdir()
    (directory / "data" / "a.csv").write_text("v\n1\n")
    (directory / "data" / "b.csv").write_text("v\n2\n")


def _grow_listed_file(directory: Path) -> None:
    with open(directory / "data" / "a.csv", "a") as f:  # a new size
        f.write("333\n")


def _write_linked_tree(directory: Path) -> None:
    """``data/`` holds a file and ``part2024``, a symlink to a directory elsewhere."""
    (directory / "data").mkdir()
    (directory / "data" / "own.txt").write_text("own\n")
    elsewhere = directory / "elsewhere" / "part2024"
    elsewhere.mkdir(parents=True)
    (elsewhere / "f.txt").write_text("1\n")
    os.symlink(elsewhere, directory / "data" / "part2024")


def _edit_under_the_link(directory: Path) -> None:
    with open(directory / "elsewhere" / "part2024" / "f.txt", "a") as f:
        f.write("22\n")


def _frame() -> object:
    import pandas as pd

    return pd.DataFrame({"a": np.arange(12), "b": np.arange(12.0) / 4})


def _write_parquet(directory: Path) -> None:
    _frame().to_parquet(directory / "t.parquet")


def _edit_parquet(directory: Path) -> None:
    df = _frame()
    df.loc[5, "b"] = -100.0
    df.to_parquet(directory / "t.parquet")


def _write_hdf(directory: Path) -> None:
    _frame().to_hdf(directory / "t.h5", key="df", format="table")


def _edit_hdf(directory: Path) -> None:
    df = _frame()
    df.loc[5, "b"] = -100.0
    df.to_hdf(directory / "t.h5", key="df", format="table", mode="w")


def _write_csv(directory: Path) -> None:
    _frame().to_csv(directory / "t.csv", index=False)


def _edit_csv(directory: Path) -> None:
    df = _frame()
    df.loc[5, "b"] = -100.0
    df.to_csv(directory / "t.csv", index=False)


# -- projects that do not fit the shared delayed shape ----------------------------------

PROJECT = '''\
import functools
import os

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
{header}

HERE = os.path.dirname(os.path.abspath(__file__))


def step_a(x):
    return x + 1


def step_c(x):
    return x - 3


{side}

def build():
{body}
'''


def project(body: str, header: str = "") -> str:
    return PROJECT.format(header=textwrap.dedent(header).strip(), side=SIDE,
                          body=textwrap.indent(textwrap.dedent(body).strip(), "    "))


def annotated(step_b: str, header: str) -> str:
    """The shared a -> b -> c shape with ``b`` built under ``dask.annotate(cache_version)``."""
    return project(f"""
        a = dask.delayed(step_a, pure=True)(1, dask_key_name="a")
        with dask.annotate(cache_version="1"):
            b = dask.delayed({step_b}, pure=True)(a, dask_key_name="b")
        c = dask.delayed(step_c, pure=True)(b, dask_key_name="c")
        return [c, side()]
    """, header)


def io_case(name: str, body: str, data, edit_data) -> Case:
    """A project reading a file with a Dask IO function; the edit rewrites the file."""
    return Case(name, {"pipe.py": project(body)}, recompute=None, data=data,
                edit_data=edit_data)


PATHS = "[os.path.join(HERE, 'data', 'a.csv'), os.path.join(HERE, 'data', 'b.csv')]"
TOTAL_SIZE = "return float(sum(os.path.getsize(p) for p in x))"
SCALER = '''\
class Scaler:
    def __init__(self, k):
        self.k = k

    @cache_version("1")
    def apply(self, x):
        return x * self.k
'''
VERSIONED_CLOSURE = '''\
def make(k):
    @cache_version("1")
    def f(x):
        return x * k

    return f
'''
VERSIONED_CLASS = '''\
@cache_version("1")
class Mul:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return x * self.k
'''
PLAIN_SCALER = '''\
class Scaler:
    def __init__(self, k):
        self.k = k

    def apply(self, x):
        return x * self.k


def mul(x, k):
    return x * k
'''
ZONED = "import datetime\nfrom zoneinfo import ZoneInfo\n\nimport pandas as pd"
WALL_TIME = "datetime.datetime(2024, 1, 15, 9, tzinfo=ZoneInfo({zone!r}))"
STAMP = "pd.Timestamp('2024-01-15 09:00', tz={zone!r})"
# Hours of UTC offset half a year later: 0.0 in UTC, 1.0 in London (summer time).
OFFSET_LATER = "return (x + datetime.timedelta(days=180)).utcoffset().total_seconds() / 3600"
RANGE_OFFSET = ("return pd.date_range(x, periods=200, freq='D')[-1].utcoffset()"
                ".total_seconds() / 3600")
TZ_COLUMN = ("pd.DataFrame({{'t': pd.Series(pd.to_datetime(['2024-01-15 09:00'] * 2))"
             ".dt.tz_localize({zone!r})}})")
GETATTR_SCALE = "def step_b(x):\n    return x * getattr(settings, 'SCALE')"
HOUR_LATER = "return float((x.t + pd.Timedelta(days=180)).dt.hour.iloc[0])"

CASES: list[Case] = [
    # 3. The zone is part of an aware value, not only its current UTC offset.
    delayed_case("aware datetime: same wall time, another zone (3)",
                 {"header": ZONED, "arg": WALL_TIME.format(zone="UTC"),
                  "a_body": OFFSET_LATER},
                 {"header": ZONED, "arg": WALL_TIME.format(zone="Europe/London"),
                  "a_body": OFFSET_LATER},
                 recompute=frozenset({"a", "b", "c"})),
    delayed_case("pd.Timestamp zone feeding pd.date_range (3)",
                 {"header": ZONED, "arg": STAMP.format(zone="UTC"), "a_body": RANGE_OFFSET},
                 {"header": ZONED, "arg": STAMP.format(zone="Europe/London"),
                  "a_body": RANGE_OFFSET},
                 recompute=frozenset({"a", "b", "c"})),
    delayed_case("DatetimeTZDtype column zone (3)",
                 {"header": ZONED, "prepare": f"df = {TZ_COLUMN.format(zone='UTC')}",
                  "arg": "df", "a_body": HOUR_LATER},
                 {"header": ZONED,
                  "prepare": f"df = {TZ_COLUMN.format(zone='Europe/London')}",
                  "arg": "df", "a_body": HOUR_LATER},
                 recompute=frozenset({"a", "b", "c"})),
    # 4. and 5. pandas' own precision and unit.
    delayed_case("pd.Timedelta nanoseconds (4)",
                 {"header": "import pandas as pd", "arg": "pd.Timedelta(100, 'ns')",
                  "a_body": "return x.value"},
                 {"header": "import pandas as pd", "arg": "pd.Timedelta(900, 'ns')",
                  "a_body": "return x.value"},
                 recompute=frozenset({"a", "b", "c"})),
    delayed_case("pd.Timestamp unit (5)",
                 {"header": "import pandas as pd",
                  "arg": "pd.Timestamp('2024-01-15 09:00').as_unit('s')",
                  "a_body": "return len(str(pd.DatetimeIndex([x]).dtype))"},
                 {"header": "import pandas as pd",
                  "arg": "pd.Timestamp('2024-01-15 09:00').as_unit('ns')",
                  "a_body": "return len(str(pd.DatetimeIndex([x]).dtype))"},
                 recompute=frozenset({"a", "b", "c"})),
    # 6. Element types of object columns.
    delayed_case("object Series: bytes become str (6)",
                 {"header": "import pandas as pd",
                  "arg": "pd.Series([b'apple', b'pear', b'apple'], dtype=object)",
                  "a_body": "return int((x == 'apple').sum())"},
                 {"header": "import pandas as pd",
                  "arg": "pd.Series(['apple', 'pear', 'apple'], dtype=object)",
                  "a_body": "return int((x == 'apple').sum())"},
                 recompute=frozenset({"a", "b", "c"})),
    # 7.-9. A version replaces the code, never the bound state.
    delayed_case("cache_version method: the instance changes (7)",
                 {"header": "from client_lib import cache_version",
                  "defs": SCALER + "\n\nstep_b = Scaler(2).apply"},
                 {"header": "from client_lib import cache_version",
                  "defs": SCALER + "\n\nstep_b = Scaler(3).apply"}),
    delayed_case("cache_version closure: the closed-over value changes (8)",
                 {"header": "from client_lib import cache_version",
                  "defs": VERSIONED_CLOSURE + "\n\nstep_b = make(2)"},
                 {"header": "from client_lib import cache_version",
                  "defs": VERSIONED_CLOSURE + "\n\nstep_b = make(3)"}),
    delayed_case("cache_version class: the called instance changes (8)",
                 {"header": "from client_lib import cache_version",
                  "defs": VERSIONED_CLASS + "\n\nstep_b = Mul(2)"},
                 {"header": "from client_lib import cache_version",
                  "defs": VERSIONED_CLASS + "\n\nstep_b = Mul(3)"}),
    Case("annotated cache_version: partial arguments change (9)",
         {"pipe.py": annotated("functools.partial(mul, k=2)", PLAIN_SCALER)},
         {"pipe.py": annotated("functools.partial(mul, k=3)", PLAIN_SCALER)}),
    Case("annotated cache_version: bound instance changes (9)",
         {"pipe.py": annotated("Scaler(2).apply", PLAIN_SCALER)},
         {"pipe.py": annotated("Scaler(3).apply", PLAIN_SCALER)}),
    # 10. Paths are stamped wherever they sit.
    delayed_case("file listed in a pandas column, to a delayed task (10)",
                 {"header": "import os\nimport pandas as pd\n\n"
                            "HERE = os.path.dirname(os.path.abspath(__file__))",
                  "prepare": f"manifest = pd.DataFrame({{'path': {PATHS}}})",
                  "arg": "manifest", "a_body": TOTAL_SIZE.replace("in x", "in x.path")},
                 {"header": "import os\nimport pandas as pd\n\n"
                            "HERE = os.path.dirname(os.path.abspath(__file__))",
                  "prepare": f"manifest = pd.DataFrame({{'path': {PATHS}}})",
                  "arg": "manifest", "a_body": TOTAL_SIZE.replace("in x", "in x.path")},
                 recompute=frozenset({"a", "b", "c"}),
                 data=_write_listed_files, edit_data=_grow_listed_file),
    Case("file listed in a pandas column, through dd.from_pandas and map_partitions (10)",
         {"pipe.py": project(f"""
             manifest = pd.DataFrame({{"path": {PATHS}}})
             ddf = dd.from_pandas(manifest, npartitions=2)
             sizes = ddf.map_partitions(
                 lambda part: part.assign(size=[os.path.getsize(p) for p in part.path]),
                 meta={{"path": "object", "size": "int64"}})
             return [sizes["size"].sum(), side()]
         """)},
         recompute=None, data=_write_listed_files, edit_data=_grow_listed_file),
    *[delayed_case(f"file listed in a numpy {kind} array (10)",
                   {"header": "import os\n\nHERE = os.path.dirname(os.path.abspath(__file__))",
                    "arg": f"np.array({PATHS}{convert})", "a_body": TOTAL_SIZE},
                   {"header": "import os\n\nHERE = os.path.dirname(os.path.abspath(__file__))",
                    "arg": f"np.array({PATHS}{convert})", "a_body": TOTAL_SIZE},
                   recompute=frozenset({"a", "b", "c"}),
                   data=_write_listed_files, edit_data=_grow_listed_file)
      for kind, convert in [("<U", ""), ("S", ", dtype='S'"), ("object", ", dtype=object")]],
    # 11. Directory stamps follow symlinks.
    delayed_case("file under a symlinked subdirectory of a directory argument (11)",
                 {"header": "import os\n\nHERE = os.path.dirname(os.path.abspath(__file__))",
                  "arg": "os.path.join(HERE, 'data')",
                  "a_body": "return float(sum(os.path.getsize(os.path.join(r, f)) "
                            "for r, _, fs in os.walk(x, followlinks=True) for f in fs))"},
                 {"header": "import os\n\nHERE = os.path.dirname(os.path.abspath(__file__))",
                  "arg": "os.path.join(HERE, 'data')",
                  "a_body": "return float(sum(os.path.getsize(os.path.join(r, f)) "
                            "for r, _, fs in os.walk(x, followlinks=True) for f in fs))"},
                 recompute=frozenset({"a", "b", "c"}),
                 data=_write_linked_tree, edit_data=_edit_under_the_link),
    # 12. getattr with a literal name is an attribute access.
    delayed_case("getattr(module, 'LITERAL') (12)",
                 {"header": "import settings",
                  "defs": GETATTR_SCALE},
                 {"header": "import settings", "defs": GETATTR_SCALE},
                 {"settings.py": "SCALE = 2\n"}, {"settings.py": "SCALE = 3\n"}),
    # 14. IO functions hit across processes (and see their files change).
    io_case("dd.read_parquet (14)",
            "return [dd.read_parquet(os.path.join(HERE, 't.parquet')).b.sum(), side()]",
            _write_parquet, _edit_parquet),
    io_case("dd.read_hdf (14)",
            "return [dd.read_hdf(os.path.join(HERE, 't.h5'), key='df').b.sum(), side()]",
            _write_hdf, _edit_hdf),
    io_case("dd.read_csv (14)",
            "return [dd.read_csv(os.path.join(HERE, 't.csv')).b.sum(), side()]",
            _write_csv, _edit_csv),
]
