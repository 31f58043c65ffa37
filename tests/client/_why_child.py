"""``python -m tests.client._why_child DIR URL NAMESPACE MODE``: import ``pipe`` from
``DIR`` in this fresh process and either compute ``pipe.build()`` through the cache
(``run``) or print what ``why`` says about it as JSON (``why``)."""

from __future__ import annotations

import dataclasses
import json
import sys


def main(directory: str, url: str, namespace: str, mode: str) -> None:
    sys.path.insert(0, directory)
    import pipe

    from client_lib import cached_compute, why
    from client_lib.plan.runs import flush_posts

    if mode == "run":
        cached_compute(*pipe.build(), cache=url, namespace=namespace, policy="all",
                       scheduler="threads")
        assert flush_posts(30)
        return
    found = why(*pipe.build(), cache=url, namespace=namespace, explain=True)
    print("JSON" + json.dumps({"records": [dataclasses.asdict(r) for r in found],
                               "text": str(found), "unreadable": found.unreadable}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
