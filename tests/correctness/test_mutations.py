"""Never a stale hit, always a hit when nothing changed: the mutation suite.

Every case of the catalogue (``_mutations.CASES``) is a small user project written to its
own directory.
All cases run through ``cached_compute`` (``policy="all"``, so every task is stored) in
one fresh process against a real cache server; then again, unedited, in a second fresh
process (which must be all hits); then each case gets its one edit and all run in a third
fresh process, where exactly the edited task and its descendants must compute and the
result must equal a plain ``dask.compute`` of the edited code. Batching the cases into
three processes keeps the suite to a few seconds of interpreter start-up.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests._compare import assert_same
from tests.correctness._library import build_wheel, install, uninstall
from tests.correctness._mutations import CASES, LIBRARIES
from tests.correctness._projects import EVERYTHING, MAIN, Case, key_name

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _run_children(spec: dict, out: Path, env: dict) -> dict:
    spec_path = out.with_suffix(".json")
    spec_path.write_text(json.dumps(spec))
    subprocess.run([sys.executable, "-m", "tests.correctness._child", str(spec_path),
                    str(out)], cwd=ROOT, env=env, check=True, timeout=600)
    return pickle.loads(out.read_bytes())


def _install_libraries(root: Path, site: Path, phase: int) -> None:
    wheels = []
    for name, versions in LIBRARIES.items():
        version, source = versions[2 * phase], versions[2 * phase + 1]
        wheels.append(build_wheel(root / "wheels" / str(phase), name, version, source))
        uninstall(name, site)
    install(wheels, site)
    assert sorted(p.name for p in site.glob("*.dist-info")) == sorted(
        f"{name}-{versions[2 * phase]}.dist-info" for name, versions in LIBRARIES.items())


@pytest.fixture(scope="module")
def runs(cache_server, tmp_path_factory) -> dict[str, dict]:
    """The three runs of every case: ``cold``, ``warm`` (no edit) and ``edited``."""
    root = tmp_path_factory.mktemp("mutations")
    site = root / "lib" / "site-packages"
    _install_libraries(root, site, 0)
    specs = []
    for case in CASES:
        directory = root / case.slug
        case.write(directory)
        specs.append({"name": case.name, "dir": str(directory),
                      "namespace": f"mutation-{uuid.uuid4().hex}"})
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(site),
                                                       os.environ.get("PYTHONPATH")]))}
    spec = {"url": cache_server.url, "cases": specs}
    cold = _run_children(spec, root / "cold.pkl", env)
    warm = _run_children(spec, root / "warm.pkl", env)
    for case, case_spec in zip(CASES, specs, strict=True):
        case.apply_edit(Path(case_spec["dir"]))
        if case.new_namespace:
            case_spec["namespace"] = f"mutation-{uuid.uuid4().hex}"
    _install_libraries(root, site, 1)
    edited = _run_children(spec, root / "edited.pkl", env)
    return {"cold": cold, "warm": warm, "edited": edited}


def _result(runs: dict, phase: str, case: Case) -> dict:
    result = runs[phase][case.name]
    assert result["error"] is None, f"{phase} run of {case.name!r} failed:\n{result['error']}"
    assert result["report"]["fallback"] is None, result["report"]
    assert result["report"]["volatile"] == 0, result["volatile_reasons"]
    assert_same(list(result["value"]), list(result["expected"]), f"{phase}: {case.name}")
    return result


def _differs(a, b) -> bool:
    try:
        assert_same(a, b)
    except AssertionError:
        return True
    return False


def test_there_are_enough_cases():
    assert len(CASES) >= 50


@pytest.mark.parametrize("case", CASES, ids=[c.slug for c in CASES])
def test_cold_run_computes_everything_and_equals_dask(runs, case):
    result = _result(runs, "cold", case)
    report = result["report"]
    assert result["loaded_keys"] == [] and report["hits"] == 0, report
    assert report["computed"] > 0 and report["stored"] > 0, report


@pytest.mark.parametrize("case", CASES, ids=[c.slug for c in CASES])
def test_unedited_rerun_in_a_fresh_process_is_all_hits(runs, case):
    result = _result(runs, "warm", case)
    report = result["report"]
    assert result["computed_keys"] == [], result["computed_keys"]
    assert report["hits"] == report["cacheable"] > 0, report
    assert report["loaded"] >= 1, report


@pytest.mark.parametrize("case", CASES, ids=[c.slug for c in CASES])
def test_edit_recomputes_exactly_the_edited_task_and_its_descendants(runs, case):
    result = _result(runs, "edited", case)
    before = runs["cold"][case.name]["expected"]
    # The edit must matter, or a stale hit would go unnoticed in the value.
    assert _differs(list(result["expected"]), list(before)) != case.same_result, (
        "the case's edit should " + ("not " if case.same_result else "") + "change the result")
    computed = [key_name(k) for k in result["computed_keys"]]
    loaded = {key_name(k) for k in result["loaded_keys"]}
    if isinstance(case.recompute, frozenset):
        assert sorted(computed) == sorted(case.recompute), (computed, loaded)
    elif case.recompute == MAIN:
        assert computed and not any(name.startswith("side") for name in computed), computed
        assert loaded == {"side"}, loaded  # nothing else was a hit
    elif case.recompute == EVERYTHING:
        assert result["loaded_keys"] == [] and result["report"]["hits"] == 0
    else:
        assert case.recompute is None
