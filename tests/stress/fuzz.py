"""Fault campaign 7: schemathesis against the live server's OpenAPI schema, at size.

Runs ``tests/reliability/test_fuzz.py`` (a real server, every operation) with
``--examples`` examples per operation and reports how many requests were made. Any 5xx,
undeclared status or response off its schema fails the run.

    python -m tests.stress.fuzz --examples 500
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from tests.stress._common import ROOT, campaign_parser, print_report

__all__ = ["main"]


def main() -> None:
    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500, help="examples per operation")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        count_file = os.path.join(workdir, "count.json")
        env = {**os.environ, "RC_FUZZ_EXAMPLES": str(args.examples),
               "RC_FUZZ_COUNT_FILE": count_file}
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "tests/reliability/test_fuzz.py"], cwd=ROOT, env=env, capture_output=True,
            text=True)
        counts = json.loads(open(count_file).read()) if os.path.exists(count_file) else {}
        report = {"examples_per_operation": args.examples, **counts,
                  "failures": 0 if result.returncode == 0 else 1,
                  "seconds": round(time.monotonic() - started, 1)}
    if result.returncode != 0:
        print(result.stdout[-5000:], file=sys.stderr)
    print_report("fuzz", report)
    sys.exit(result.returncode)


if __name__ == "__main__":
    main()
