"""Why each task of a computation is loaded or recomputed, against the latest stored
version of the same task (docs/design/hashing.md, "Recipes and why"): for
:func:`client_lib.why` and a run's page on the dashboard.

Every task that computes has its recipe (what its hash is made of,
:mod:`client_lib.hashing.recipes`) compared with the one recorded for its structural
slot. The first difference found names the cause: the function's code (and
the helper or global that changed), an argument, an input file, a version, or an
upstream task, named as the root cause for everything below it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import Counter
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from dask._task_spec import Alias

from ..hashing import GraphHashes
from ..transport.interface import Transport

__all__ = ["Change", "Explainer", "Why", "WhyRecord", "explain_states", "previous_of"]

Key = Hashable
NEVER = "never computed"
UNRECORDED = "stored before explanations were recorded"
_LABELS_ASKED = 64


@dataclass
class Change:
    """One difference from the stored version. ``kind``: ``code``, ``argument``,
    ``file``, ``version``, ``value``, ``dependency``, ``expired``, ``evicted``, ``new``,
    ``unrecorded``, ``volatile`` or ``unknown``; ``name``: the function, argument, file or
    upstream task; ``detail``: the helpers and globals, or what of a file changed."""

    kind: str
    name: str = ""
    detail: str = ""


@dataclass
class WhyRecord:
    """One task: ``status`` is ``"cached"`` (it would be loaded or culled) or
    ``"compute"``; ``reason`` one sentence; ``changes`` the same as data; ``causes`` the
    root causes it is counted under when grouped."""

    key: str
    label: str
    status: str
    reason: str
    changes: list[Change] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)


@dataclass
class Why:
    """What :func:`why` found: one record per task, dependencies first."""

    records: list[WhyRecord] = field(default_factory=list)
    unreadable: int = 0  # stored recipes that did not parse (ignored)
    fallback: str | None = None  # why the cache could not be asked

    def __iter__(self) -> Iterator[WhyRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def of(self, label: str) -> list[WhyRecord]:
        """The records of the tasks with this label."""
        return [r for r in self.records if r.label == label]

    def groups(self) -> Counter:
        """Tasks to compute by root cause (a task with two causes counts under both)."""
        return Counter(c for r in self.records if r.status == "compute" for c in r.causes)

    def __str__(self) -> str:
        status = Counter(r.status for r in self.records)
        lines = [f"why: {len(self.records)} tasks: {status['cached']} cached, "
                 f"{status['compute']} compute"]
        if self.fallback:
            lines.append(f"  cache not asked: {self.fallback}")
        for cause, n in self.groups().most_common():
            lines.append(f"  {cause}: {n} task{'s' if n != 1 else ''} recompute")
        if self.unreadable:
            lines.append(f"  {self.unreadable} stored explanations could not be read "
                         "(ignored)")
        return "\n".join(lines)


def previous_of(client: Transport, current: dict[Key, dict[str, Any]]
                ) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """The recorded records of the slots of ``current`` (recipe records by key) and the
    labels, among those of slots never recorded, with entries stored without a recipe."""
    previous, _ = client.previous_recipes(sorted({r["slot"] for r in current.values()}), [])
    missing = sorted({r["label"] for r in current.values()
                      if r["slot"] not in previous})[:_LABELS_ASKED]
    unrecorded: set[str] = set()
    if missing:
        _, unrecorded = client.previous_recipes([], missing)
    return previous, unrecorded


def explain_states(graph: Any, states: dict[Key, tuple[str, str | None]],
                   hashes: GraphHashes, current: dict[Key, dict[str, Any]],
                   previous: dict[str, dict[str, Any]], unrecorded: set[str]) -> Why:
    """One record per task of ``states`` (a run's task states, dependencies first)."""
    result = Why()
    explainer = Explainer(graph, hashes.hashes, previous, unrecorded)
    for key, (state, reason) in states.items():
        node = graph.get(key)
        target = explainer.done.get(node.target) if isinstance(node, Alias) else None
        label = hashes.labels.get(key) or (target.label if target else str(key))
        if target is not None:  # an alias is what it names
            record = dataclasses.replace(target, key=str(key))
            explainer.roots[key] = explainer.roots.get(node.target, [target.label])
            explainer.causes[key] = explainer.causes.get(node.target, target.causes)
        elif state in ("loaded", "culled"):
            record = WhyRecord(str(key), label, "cached", "cached")
        elif state == "volatile":
            text = f"volatile: {reason or 'not cacheable'}"
            record = WhyRecord(str(key), label, "compute", text, [Change("volatile", label,
                                                                          reason or "")],
                               [text])
        else:
            record = explainer.explain(key, label, current.get(key))
        explainer.done[key] = record
        result.records.append(record)
    result.unreadable = explainer.unreadable
    return result


class Explainer:
    """Compares each task's recipe with its slot's stored one, dependencies first."""

    def __init__(self, graph: Any, published: dict[Key, str],
                 previous: dict[str, dict[str, Any]], unrecorded: set[str]) -> None:
        self.graph = graph
        self.published = published
        self.previous = previous
        self.unrecorded = unrecorded
        self.done: dict[Key, WhyRecord] = {}
        self.roots: dict[Key, list[str]] = {}  # labels of the root causes, by key
        self.causes: dict[Key, list[str]] = {}  # their sentences, for grouping
        self.unreadable = 0
        self.now = time.time()

    def explain(self, key: Key, label: str, current: dict[str, Any] | None) -> WhyRecord:
        if current is None:  # no hash, or no recipe could be made
            return self._record(key, label, [Change("unknown", label)],
                                "changed (no recipe could be made)")
        record = self.previous.get(current["slot"])
        if record is None:
            if label in self.unrecorded:
                return self._record(key, label, [Change("unrecorded", label)], UNRECORDED)
            return self._record(key, label, [Change("new", label)], NEVER)
        stored = _parse(record.get("recipe"))
        if stored is None:
            self.unreadable += 1
            return self._record(key, label, [Change("unrecorded", label)], UNRECORDED)
        if record.get("hash") == current["hash"]:
            expires = record.get("expires")
            kind = "expired" if expires is not None and expires <= self.now else "evicted"
            return self._record(key, label, [Change(kind, label)], kind)
        return self._record(key, label, _differences(current["recipe"], stored, label),
                            deps=self._changed_dependencies(key, stored))

    def _changed_dependencies(self, key: Key, stored: dict[str, Any]) -> list[Key]:
        before = set(stored.get("d", ()))
        return [dep for dep in getattr(self.graph.get(key), "dependencies", ())
                if (h := self.published.get(dep)) is not None and h[:16] not in before]

    def _record(self, key: Key, label: str, changes: list[Change],
                reason: str | None = None, deps: list[Key] = ()) -> WhyRecord:
        roots: list[str] = []
        causes: list[str] = []
        for dep in deps:  # the root causes upstream, named once each
            for _ in range(100):  # an alias stands for what it names
                node = self.graph.get(dep)
                if not isinstance(node, Alias) or dep in self.roots:
                    break
                dep = node.target
            for root in self.roots.get(dep) or [self.done[dep].label if dep in self.done
                                                 else str(dep)]:
                if root not in roots:
                    roots.append(root)
            for cause in self.causes.get(dep) or [f"{roots[-1]} changed"]:
                if cause not in causes:
                    causes.append(cause)
        if roots:
            changes.append(Change("dependency", ", ".join(roots)))
        if not changes:
            changes.append(Change("unknown", label))
        own = [c for c in changes if c.kind != "dependency"]
        if own:  # a function passed as an argument (map_partitions) is named as itself
            self.roots[key] = list(dict.fromkeys(c.name if c.kind == "code" else label
                                                 for c in own))
            self.causes[key] = [reason] if reason else [_sentence(c) for c in own]
        else:
            self.roots[key], self.causes[key] = roots, causes
        return WhyRecord(str(key), label, "compute",
                         reason or "; ".join(_sentence(c) for c in changes), changes,
                         self.causes[key])


def _sentence(change: Change) -> str:
    kind = change.kind
    if kind == "code":
        return f"code of {change.name} changed" + (f" ({change.detail})" if change.detail
                                                    else "")
    if kind == "argument":
        return f"argument {change.name} changed"
    if kind == "file":
        return f"input file {change.name} changed ({change.detail})"
    if kind == "version":
        return f"version changed ({change.detail})"
    if kind == "value":
        return "its value changed"
    if kind == "dependency":
        return f"depends on {change.name}, which changed"
    if kind == "new":
        return NEVER
    if kind == "unrecorded":
        return UNRECORDED
    if kind == "volatile":
        return f"volatile: {change.detail}"
    if kind in ("expired", "evicted"):
        return kind
    return "changed in a way the recipe does not show"


def _differences(now: dict[str, Any], before: dict[str, Any], label: str) -> list[Change]:
    """What differs between two recipes, each part by name (the function by the task's
    label, as ``explain`` prints it)."""
    changes: list[Change] = []
    f_now, f_before = now.get("f") or [], before.get("f") or []
    old = {n: d for n, d in f_before}
    if f_now and (not f_before or f_now[0][1] != f_before[0][1]):
        name = f_now[0][0]
        body = f"{name} body"
        parts = [n for n, d in f_now[1:] if n != body and old.get(n) != d
                 and not n.startswith("argument ")]
        parts += [n for n in old if n not in dict(f_now) and n not in (body, name)
                  and not n.startswith("argument ")]
        body_changed = dict(f_now).get(body) != old.get(body)
        changes.append(Change("code", label, ", ".join(parts[:6]) if parts and (
            not body_changed) else ""))
    for name, digest in f_now[1:]:  # functions passed as arguments (map_partitions)
        if name.startswith("argument ") and old.get(name) != digest:
            argument, _, function = name.partition(": ")
            changes.append(Change("code", function.rpartition(".")[2] or function,
                                  argument))
    a_now, a_before = dict(map(tuple, now.get("a") or [])), dict(
        map(tuple, before.get("a") or []))
    for name in [*a_now, *(n for n in a_before if n not in a_now)]:
        if a_now.get(name) != a_before.get(name):
            changes.append(Change("argument", name))
    files_before = {p: (s, t) for p, s, t in before.get("i") or []}
    for path, size, mtime in now.get("i") or []:
        old_stamp = files_before.get(path)
        if old_stamp is not None and old_stamp != (size, mtime):
            what = [w for w, differs in (("mtime", old_stamp[1] != mtime),
                                         ("size", old_stamp[0] != size)) if differs]
            changes.append(Change("file", os.path.basename(path) or path, ", ".join(what)))
    if (now.get("v") or []) != (before.get("v") or []):
        gone = [v for v in before.get("v") or [] if v not in (now.get("v") or [])]
        new = [v for v in now.get("v") or [] if v not in (before.get("v") or [])]
        changes.append(Change("version", "", ", ".join([*gone, *new])[:200]))
    if now.get("data") != before.get("data"):
        changes.append(Change("value"))
    return changes


def _parse(text: Any) -> dict[str, Any] | None:
    """A stored recipe, or ``None`` when it does not parse as one."""
    try:
        recipe = json.loads(text) if isinstance(text, str) else text
        if not isinstance(recipe, dict):
            return None
        for part in ("f", "a"):
            for name, digest in recipe.get(part) or []:
                if not isinstance(name, str) or not isinstance(digest, str):
                    return None
        for path, _size, _mtime in recipe.get("i") or []:
            if not isinstance(path, str):
                return None
        if not all(isinstance(d, str) for d in recipe.get("d") or []):
            return None
        return recipe
    except (ValueError, TypeError):
        return None
