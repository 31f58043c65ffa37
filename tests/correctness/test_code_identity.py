"""A function is identified by what it does, wherever it lives (issue 10, items 15 and 17).

15: a script run as ``__main__`` stores its results; a notebook-style process that
imports the same file as a module, or a copy of it under another name, is served every
task; a copy whose code differs is not. 17: lambdas and nested functions of an installed
library are told apart by their code, not by the qualified name they share.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.correctness._library import build_wheel, install

pytestmark = pytest.mark.slow  # fresh processes

ROOT = Path(__file__).resolve().parents[2]

CHAIN = '''\
import dask
import numpy as np

SCALE = 2.0


def step_1(n):
    return np.arange(n) * SCALE


def step_2(a):
    return a + 1


def step_3(b):
    return float(b.sum())


def build():
    a = dask.delayed(step_1, pure=True)(1000)
    b = dask.delayed(step_2, pure=True)(a)
    return dask.delayed(step_3, pure=True)(b)


if __name__ == "__main__":
    import sys

    sys.path.insert(0, sys.argv[3])
    from _report import compute_and_report

    compute_and_report(build(), sys.argv[1], sys.argv[2])
'''

REPORT = '''\
import json

from client_lib import cached_compute, last_report


def compute_and_report(collection, url, namespace):
    import dask

    (value,) = cached_compute(collection, cache=url, namespace=namespace, policy="all",
                              scheduler="threads")
    r = last_report()
    print(json.dumps({"value": value, "expected": dask.compute(collection)[0],
                      "hits": r.hits, "cacheable": r.cacheable, "loaded": r.loaded,
                      "computed": r.computed, "volatile": r.volatile}))
'''

NOTEBOOK = '''\
import sys

sys.path.insert(0, sys.argv[3])
from _report import compute_and_report
import {module}

compute_and_report({module}.build(), sys.argv[1], sys.argv[2])
'''


def _run(args: list[str], cwd: Path, extra_path: str = "") -> dict:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [extra_path, str(ROOT)]))}
    out = subprocess.run([sys.executable, *args], cwd=cwd, env=env, check=True,
                         capture_output=True, text=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_script_and_the_same_module_imported_elsewhere_share_every_result(cache_server,
                                                                            tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (helpers / "_report.py").write_text(REPORT)
    (project / "chain.py").write_text(CHAIN)
    shutil.copy(project / "chain.py", project / "chain2.py")
    (project / "chain3.py").write_text(CHAIN.replace("SCALE = 2.0", "SCALE = 3.0"))
    ns = f"identity-{uuid.uuid4().hex}"
    args = [cache_server.url, ns, str(helpers)]

    script = _run(["chain.py", *args], project)  # python chain.py: functions in __main__
    assert script["value"] == script["expected"] and script["computed"] == 3, script
    for module in ("chain", "chain2"):  # a notebook importing it, or a copy of it
        notebook = _run(["-c", NOTEBOOK.format(module=module), *args], project)
        assert notebook["value"] == script["value"], (module, notebook)
        assert notebook["hits"] == notebook["cacheable"] == 3, (module, notebook)
        assert notebook["computed"] == 0 and notebook["loaded"] == 1, (module, notebook)
    # Equal hashes must mean equal computations: a copy with another constant misses
    # exactly the tasks that read it.
    other = _run(["-c", NOTEBOOK.format(module="chain3"), *args], project)
    assert other["value"] == other["expected"] != script["value"], other
    assert other["computed"] == 3 and other["hits"] == 0, other


LAMBDAS = '''\
import dask


def build():
    return [dask.delayed(lambda x: x + 1, pure=True)(1),
            dask.delayed(lambda x: x * 100, pure=True)(1)]


def nested(k):
    def scale(x):
        return x * k

    return scale
'''

LIBRARY_USER = '''\
import sys

sys.path.insert(0, sys.argv[3])
import dask
from _report import compute_and_report
import tinylib_lambdas

delayed = [*tinylib_lambdas.build(),
           dask.delayed(tinylib_lambdas.nested(2), pure=True)(1),
           dask.delayed(tinylib_lambdas.nested(3), pure=True)(1)]
compute_and_report(delayed, sys.argv[1], sys.argv[2])
'''


def test_lambdas_and_closures_of_an_installed_library_are_told_apart(cache_server, tmp_path):
    site = tmp_path / "lib" / "site-packages"
    install([build_wheel(tmp_path / "wheels", "tinylib_lambdas", "1.0", LAMBDAS)], site)
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (helpers / "_report.py").write_text(REPORT)
    ns = f"lambdas-{uuid.uuid4().hex}"
    args = ["-c", LIBRARY_USER, cache_server.url, ns, str(helpers)]
    for phase in ("cold", "warm"):
        result = _run(args, tmp_path, str(site))
        assert result["expected"] == [2, 100, 2, 3]
        assert result["value"] == result["expected"], (phase, result)
    assert result["computed"] == 0 and result["hits"] == result["cacheable"], result
