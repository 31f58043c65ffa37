"""``plan``, ``visualize`` and ``why``: what ``cached_compute`` would do, without running
anything, the task graph coloured by it, and why each task would be recomputed
(docs/design/dashboard-and-runs.md, "The dashboard"; docs/design/hashing.md, "Recipes and
why").

``plan`` hashes the graph, asks the server which hashes it holds (one lookup, counted in
the server's stats like any other) and rewrites the graph as a run would: each task is
loaded, culled, computed or volatile (with the reason); tasks the policy may store are
counted as store candidates. The estimated seconds saved are the compute seconds recorded
with the entries the run would not recompute (loaded, or culled and cached).

``visualize`` draws a plan as an SVG file (no graphviz needed): tasks by dependency depth,
coloured as on the dashboard's run page, the state and reason as each node's tooltip.
"""

from __future__ import annotations

import html
import warnings
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from dask.base import unpack_collections

from .core.errors import ResultCacheError
from .execution.specs import StoreRun
from .hashing.recipes import recipe_records
from .plan.explain import Why, explain_states, previous_of
from .plan.hashed import hash_collections
from .plan.rewrite import rewrite
from .plan.run import look_up
from .plan.runs import task_list, task_states
from .plan.settings import NO_CACHE, namespace_of, resolve_cache
from .policy.modes import resolve_policy

__all__ = ["Plan", "plan", "task_graph_svg", "visualize", "why"]

Key = Hashable
#: Entries whose compute seconds a plan reads for its estimate (one request each).
_MAX_ESTIMATED = 1000
#: Larger graphs are summarised by label (one bar each) rather than drawn task by task.
MAX_DRAWN = 500
#: The same colours as the dashboard (static/dashboard/dashboard.css).
COLOURS = {"loaded": "#2b8a3e", "culled": "#adb5bd", "computed": "#e8590c",
           "stored": "#1c7ed6", "volatile": "#ae3ec9", "hit": "#f2c94c"}


@dataclass
class Plan:
    """What ``cached_compute`` would do. ``tasks`` is the task list of a run summary
    (``key``, ``label``, ``state``, ``reason``, ``deps`` as positions in the list)."""

    tasks: list[dict[str, Any]] = field(default_factory=list)
    store_candidates: int = 0
    estimated_seconds_saved: float = 0.0
    estimated_from: int = 0  # entries whose seconds the estimate adds up
    fallback: str | None = None  # why the plan could not ask the cache

    @property
    def counts(self) -> Counter:
        return Counter(t["state"] for t in self.tasks)

    def state(self, key: Key) -> str | None:
        return next((t["state"] for t in self.tasks if t["key"] == str(key)), None)

    def __str__(self) -> str:
        counts = ", ".join(f"{state} {n}" for state, n in sorted(self.counts.items()))
        lines = [f"plan: {len(self.tasks)} tasks: {counts}; {self.store_candidates} store "
                 f"candidates; about {self.estimated_seconds_saved:.2f} s saved "
                 f"(recorded seconds of {self.estimated_from} entries)"]
        if self.fallback:
            lines.append(f"  cache not asked: {self.fallback}")
        return "\n".join(lines)


@dataclass
class _DryRun:
    client: Any
    namespace: str
    hashed: Any
    hits: set[str]
    fallback: str | None
    wrapped: int
    states: dict[Key, tuple[str, str | None]]


def _dry_run(args: tuple, cache: Any, policy: Any, namespace: str | None, traverse: bool,
             optimize_graph: bool) -> _DryRun | None:
    """What ``plan`` and ``why`` share: hash, one lookup, rewrite; ``None``: no
    collections."""
    collections, _ = unpack_collections(*args, traverse=traverse)
    if not collections:
        return None
    client = resolve_cache(cache)
    ns = namespace_of(namespace)
    hashed = hash_collections(collections, namespace=ns,
                              signing_key=client.signing_key if client is not None else None,
                              optimize_graph=optimize_graph)
    m, order, hashes = hashed.m, hashed.order, hashed.hashes
    cacheable = hashed.cacheable()
    if client is None:
        hits, fallback = set(), NO_CACHE
    else:
        hits, fallback = look_up(client, set(cacheable.values()))
    run = StoreRun(client, resolve_policy(policy), "plan")  # type: ignore[arg-type]
    rewritten = rewrite(m, order, hashes, cacheable, hits, run)
    states = task_states(m.graph, order, hashes, hits, rewritten.loaded_keys,
                         rewritten.computed_keys, frozenset())
    return _DryRun(client, ns, hashed, hits, fallback, rewritten.wrapped, states)


def plan(*args: Any, cache: Any = None, policy: Any = None, namespace: str | None = None,
         traverse: bool = True, optimize_graph: bool = True) -> Plan:
    """What ``cached_compute(*args, ...)`` would do now, task by task, without running
    anything or storing. A server that cannot be asked gives a plan of computed tasks with
    the reason in ``fallback``."""
    dry = _dry_run(args, cache, policy, namespace, traverse, optimize_graph)
    if dry is None:
        return Plan()
    client, hashes, hits, states = dry.client, dry.hashed.hashes, dry.hits, dry.states
    result = Plan(fallback=dry.fallback, store_candidates=dry.wrapped)
    result.tasks = task_list(states, dry.hashed.m.graph, hashes.labels)
    saved_hashes = {hashes.hashes[k] for k, (state, _) in states.items()
                    if state in ("loaded", "culled") and hashes.hashes.get(k) in hits}
    if client is not None and saved_hashes:
        for task_hash in sorted(saved_hashes)[:_MAX_ESTIMATED]:
            try:
                entry = client.entry(task_hash)
            except ResultCacheError:
                break
            if entry is not None:
                result.estimated_seconds_saved += float(entry.get("compute_seconds", 0.0))
                result.estimated_from += 1
    return result


def why(*args: Any, cache: Any = None, namespace: str | None = None, policy: Any = None,
        traverse: bool = True, optimize_graph: bool = True, explain: bool = False) -> Why:
    """Why ``cached_compute(*args)`` would load or recompute each task, without running
    anything (docs/design/hashing.md, "Recipes and why"): a :class:`~.plan.explain.Why`
    of one record per task (``label``, ``status`` "cached" or "compute", ``reason``,
    ``changes``). ``explain=True`` prints the reasons grouped, one line per cause with the
    count of tasks it makes recompute. A server that cannot be asked gives records of
    tasks to compute, and ``fallback`` says why."""
    dry = _dry_run(args, cache, policy, namespace, traverse, optimize_graph)
    if dry is None:
        return Why()
    m, hashes, fallback = dry.hashed.m, dry.hashed.hashes, dry.fallback
    computed = {hashes.hashes[k] for k, (state, _) in dry.states.items()
                if state == "computed" and k in hashes.hashes}
    current = recipe_records(m.graph, dry.hashed.order, m.keys, hashes, dry.namespace, m,
                             only=computed, signing_key=getattr(dry.client, "signing_key", None))
    previous: dict[str, dict[str, Any]] = {}
    unrecorded: set[str] = set()
    if dry.client is not None and fallback is None and current:
        try:
            previous, unrecorded = previous_of(dry.client, current)
        except ResultCacheError as exc:
            fallback = f"recipes not read ({exc})"
    result = explain_states(m.graph, dry.states, hashes, current, previous, unrecorded)
    result.fallback = fallback
    if result.unreadable:
        warnings.warn(f"why: {result.unreadable} stored explanations could not be read "
                      "and were ignored", RuntimeWarning, stacklevel=2)
    if explain:
        print(result)
    return result


def visualize(*args: Any, filename: str = "plan.svg", **plan_kwargs: Any) -> Plan:
    """Draw what ``cached_compute(*args)`` would do as an SVG file (``filename``); returns
    the :class:`Plan`. Keyword arguments go to :func:`plan`."""
    result = plan(*args, **plan_kwargs)
    with open(filename, "w", encoding="utf-8") as out:
        out.write(task_graph_svg(result.tasks, title=str(result)))
    return result


def task_graph_svg(tasks: list[dict[str, Any]], title: str = "") -> str:
    """An SVG of a task list: rows by dependency depth, one circle per task coloured by its
    state, an edge per dependency, the key, state and reason as each circle's tooltip.
    Past :data:`MAX_DRAWN` tasks, one bar per label instead, split by state."""
    if len(tasks) > MAX_DRAWN:
        return _label_bars(tasks, title)
    depth = [0] * len(tasks)
    for i, task in enumerate(tasks):
        for d in task.get("deps", ()):
            depth[i] = max(depth[i], depth[d] + 1)
    layers: dict[int, list[int]] = {}
    for i, d in enumerate(depth):
        layers.setdefault(d, []).append(i)
    gap_x, gap_y, radius = 26, 40, 8
    widest = max((len(layer) for layer in layers.values()), default=1)
    width, height = max(240, widest * gap_x + 40), len(layers) * gap_y + 70
    pos: dict[int, tuple[float, float]] = {}
    for y, layer in layers.items():
        for x, i in enumerate(layer):
            pos[i] = (20 + (x + 0.5) * (width - 40) / len(layer), 20 + y * gap_y)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
             f"<title>{html.escape(title)}</title>",
             '<rect width="100%" height="100%" fill="white"/>']
    for i, task in enumerate(tasks):
        for d in task.get("deps", ()):
            (x1, y1), (x2, y2) = pos[d], pos[i]
            parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                         'stroke="#ced4da"/>')
    for i, task in enumerate(tasks):
        x, y = pos[i]
        tip = f"{task['label']}: {task['state']}"
        if task.get("reason"):
            tip += f" ({task['reason']})"
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius}" class="{task["state"]}" '
                     f'fill="{COLOURS[task["state"]]}" stroke="#343a40"><title>'
                     f'{html.escape(tip)}\n{html.escape(task["key"])}</title></circle>')
    x = 10
    for state, colour in COLOURS.items():
        parts.append(f'<circle cx="{x + 6}" cy="{height - 16}" r="6" fill="{colour}"/>'
                     f'<text x="{x + 16}" y="{height - 12}">{state}</text>')
        x += 80
    parts.append("</svg>")
    return "\n".join(parts)


def _label_bars(tasks: list[dict[str, Any]], title: str) -> str:
    by_label: dict[str, Counter] = {}
    for task in tasks:
        by_label.setdefault(task["label"], Counter())[task["state"]] += 1
    rows = sorted(by_label.items(), key=lambda item: -sum(item[1].values()))[:200]
    most = max(sum(c.values()) for _, c in rows)
    width, height = 760, 20 * len(rows) + 50
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11"><title>{html.escape(title)}</title>',
             '<rect width="100%" height="100%" fill="white"/>']
    for row, (label, counts) in enumerate(rows):
        y, x = 10 + 20 * row, 200.0
        parts.append(f'<text x="4" y="{y + 12}">{html.escape(label[:30])}</text>')
        for state, colour in COLOURS.items():
            n = counts.get(state, 0)
            if n:
                w = 540 * n / most
                parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="14" '
                             f'fill="{colour}" class="{state}"><title>{html.escape(label)}: '
                             f'{n} {state}</title></rect>')
                x += w
    parts.append("</svg>")
    return "\n".join(parts)
