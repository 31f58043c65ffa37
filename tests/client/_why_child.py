"""``python -m tests.client._why_child DIR URL NAMESPACE MODE``: import ``pipe`` from
``DIR`` in this fresh process and either compute ``pipe.build()`` through the cache, then
``pipe.submit(url, namespace)`` if it has one (``run``), or print as JSON what ``why``
says about ``pipe.build()`` and each of ``pipe.why_groups()`` if it has them (``why``)."""

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
        if hasattr(pipe, "submit"):
            pipe.submit(url, namespace)
        assert flush_posts(30)
        return
    groups = [pipe.build(), *(pipe.why_groups() if hasattr(pipe, "why_groups") else [])]
    answers = []
    for group in groups:
        found = why(*group, cache=url, namespace=namespace, explain=True)
        answers.append({"records": [dataclasses.asdict(r) for r in found],
                        "text": str(found), "unreadable": found.unreadable})
    print("JSON" + json.dumps(answers[0] if len(answers) == 1 else answers))


if __name__ == "__main__":
    main(*sys.argv[1:5])
