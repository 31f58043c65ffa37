"""The graph rewrite: hits become loads, their upstream is culled, kept tasks that may be
stored get a store spec. Keys do not change. docs/design/rewrite-and-policy.md, The rewrite.

Decisions are made per operation (on the unfused graph), but execution is packed back
into Dask's own fused tasks: each group of operations that came out of one fused task
runs as one task (:func:`~client_lib.execution.tasks.run_group`), so the scheduler sees as many
tasks as ``dask.compute`` would give it.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Hashable, Set
from dataclasses import dataclass

from dask._task_spec import Alias, Dict, GraphNode, Task, TaskRef

from ..execution.specs import StoreRun, StoreSpec
from ..execution.tasks import load_result, run_and_store, run_group
from ..hashing import GraphHashes
from ..policy.costs import expected_seconds
from ..policy.expiry import default_ttl, parse_ttl
from .materialize import Materialized

__all__ = ["Rewritten", "cacheable_keys", "rewrite"]

Key = Hashable
_MAX_UPSTREAM = 256  # hashes a store spec carries for its upstream chain
_UNKNOWN = math.inf
_WRAP_FIRST = 32  # cheap tasks of one function still wrapped in every run
_WRAP_EVERY = 64  # and, beyond those, one in this many


@dataclass
class Rewritten:
    graph: dict[Key, GraphNode]
    loaded: int
    culled: int
    wrapped: int
    computed: int
    loaded_keys: list[Key]  # keys (of the unfused graph) that became loads
    computed_keys: list[Key]  # tasks that run
    specs: dict[Key, StoreSpec]  # the store wrappers, by key (leases are set on them)
    unwrapped: int = 0  # cheap tasks left without a store wrapper


def _trivial(node: Task) -> bool:
    """Picking an item out of a tuple or list result: never worth an entry of its own."""
    return node.func is operator.getitem and len(node.args) == 2 and isinstance(
        node.args[1], int)


def _output_tasks(graph: dict[Key, GraphNode], keys: list[Key]) -> set[Key]:
    """The requested keys, with aliases followed to the tasks that compute them."""
    outputs = set()
    for key in keys:
        while isinstance(node := graph.get(key), Alias) and key not in outputs:
            outputs.add(key)
            key = node.target
        outputs.add(key)
    return outputs


def cacheable_keys(m: Materialized, hashes: GraphHashes) -> dict[Key, str]:
    """Keys whose results may be looked up and stored (hashed tasks without side
    effects), with their task hashes."""
    pinned = hashes.pinned
    graph = m.graph
    return {k: h for k, h in hashes.hashes.items()
            if k not in pinned and isinstance(graph[k], Task)}


def rewrite(m: Materialized, order: list[Key], hashes: GraphHashes,
            cacheable: dict[Key, str], hits: set[str], run: StoreRun,
            overwrite: Set[str] = frozenset()) -> Rewritten:
    """Walk back from the outputs; a cacheable key whose hash is in ``hits`` becomes a
    load under the same key and its dependencies are not visited (culled). ``order`` is
    the graph's dependency order (from :func:`~client_lib.plan.materialize.toposort`:
    exactly the keys the outputs reach, so a run without hits keeps all of it and skips
    the walk). Then one pass in ``order`` decides what may be stored (:func:`_decide`).
    Computed tasks whose hash is in ``overwrite`` (``refresh``) are stored whatever the
    policy says, replacing their entries."""
    graph = m.graph
    if hits:
        kept, loaded_keys = _walk_back(m, cacheable, hits, hashes.labels, run)
    else:
        kept, loaded_keys = {key: graph[key] for key in order}, []
    loaded = set(loaded_keys)
    specs, computed_keys, unwrapped = _decide(m, kept, loaded, order, hashes, cacheable,
                                              run, overwrite)
    executable = _pack(kept, specs, order, m.origin, loaded)
    culled = max(len(order) - len(kept), 0)
    return Rewritten(executable, len(loaded_keys), culled, len(specs), len(computed_keys),
                     loaded_keys, computed_keys, specs, unwrapped)


def _walk_back(m: Materialized, cacheable: dict[Key, str], hits: set[str],
               labels: dict[Key, str], run: StoreRun) -> tuple[dict[Key, GraphNode],
                                                               list[Key]]:
    """The nodes that run (hits replaced by loads) and the keys that became loads."""
    graph = m.graph
    kept: dict[Key, GraphNode] = {}
    loaded_keys: list[Key] = []
    stack = list(m.keys)
    while stack:
        key = stack.pop()
        if key in kept or key not in graph:
            continue
        node = graph[key]
        task_hash = cacheable.get(key)
        if task_hash is not None and task_hash in hits:
            kept[key] = Task(key, load_result, run.cache, task_hash, labels.get(key, ""),
                             run.run_id)
            loaded_keys.append(key)
            continue
        kept[key] = node
        stack.extend(node.dependencies)
    return kept, loaded_keys


def _decide(m: Materialized, kept: dict[Key, GraphNode], loaded: set[Key],
            order: list[Key], hashes: GraphHashes, cacheable: dict[Key, str],
            run: StoreRun, overwrite: Set[str]) -> tuple[dict[Key, StoreSpec], list[Key],
                                                         int]:
    """One pass in dependency order over the kept tasks: which may be stored (a store
    spec, with its upstream ``dep_hashes``), which run, and how many cheap ones were left
    unwrapped. Returns (specs, computed keys, unwrapped).

    A spec's ``dep_hashes`` are the nearest tasks upstream that record what they cost and
    raised (stored candidates and loads), looking through the tasks that do not (a
    trivial ``getitem``, a pinned or volatile task, an unwrapped one). A task that is not
    an output and whose expected chain (its function's cost here plus its most expensive
    upstream chain, client_lib/policy/costs.py) no result could be stored for gets no
    spec, except the first ``_WRAP_FIRST`` tasks of its function in this run and one in
    ``_WRAP_EVERY`` after (they keep the function's cost measured): a small graph is
    unchanged, a wide graph of cheap tasks runs as Dask would run it. A ``cache_ttl``
    annotation (or config ``result-cache.ttl``) sets the lifetime of what a task stores."""
    graph_outputs = _output_tasks(m.graph, m.keys)
    task_hashes, labels, cost_keys = hashes.hashes, hashes.labels, hashes.cost_keys
    policy = run.policy
    ttl_default = default_ttl()
    ttl_annotated = bool(m.annotations.get("cache_ttl"))
    specs: dict[Key, StoreSpec] = {}
    computed_keys: list[Key] = []
    sources: dict[Key, tuple[str, ...]] = {}
    chains: dict[Key, float] = {}  # key -> expected seconds of its chain; inf: unknown
    seen: dict[str, int] = {}  # cost key -> cheap tasks of it met so far
    unwrapped = 0
    for key in order:  # dependencies first
        node = kept.get(key)
        if node is None:
            continue
        if key in loaded:
            sources[key] = (task_hashes[key],)
            chains[key] = 0.0
            continue
        deps = node.dependencies
        upstream = tuple(dict.fromkeys(h for d in deps for h in sources.get(d, ())))[
            :_MAX_UPSTREAM] if deps else ()
        chain = max(chains.get(d, _UNKNOWN) for d in deps) if deps else 0.0
        spec = None
        if isinstance(node, Task):
            computed_keys.append(key)
            task_hash = cacheable.get(key)
            is_output = key in graph_outputs
            replace = task_hash is not None and task_hash in overwrite
            if _trivial(node):
                pass  # looked through: its chain is its upstream's
            elif task_hash is None or not (replace or policy.wraps(is_output)):
                chain = _UNKNOWN  # not measured here (pinned, volatile, not a candidate)
            else:
                cost_key = cost_keys.get(key, "")
                own = expected_seconds(cost_key)
                chain += _UNKNOWN if own is None else own
                wrap = True
                if (chain < _UNKNOWN and not is_output and not replace
                        and not policy.may_store(chain, False)):
                    n = seen[cost_key] = seen.get(cost_key, 0) + 1
                    if n > _WRAP_FIRST and n % _WRAP_EVERY:
                        wrap = False
                        unwrapped += 1
                if wrap:
                    ttl = m.annotation("cache_ttl", key) if ttl_annotated else None
                    ttl = ttl_default if ttl is None else parse_ttl(ttl)
                    spec = StoreSpec(run, task_hash, labels.get(key, ""), is_output, (),
                                     ttl, replace, cost_key=cost_key)
        chains[key] = chain
        if spec is not None:
            spec.dep_hashes = upstream
            specs[key] = spec
            sources[key] = (spec.task_hash,)
        else:
            sources[key] = upstream
    return specs, computed_keys, unwrapped


def _pack(kept: dict[Key, GraphNode], specs: dict[Key, StoreSpec], order: list[Key],
          origin: dict[Key, Key], loads: set[Key]) -> dict[Key, GraphNode]:
    """Regroup kept operations by the fused task they came from; wrap stored singles.
    Loads stay tasks of their own (their results are what a failed load names)."""
    if not origin:  # nothing was fused: every operation is a task of its own
        return {key: _single(key, kept[key], specs.get(key)) for key in order if key in kept}
    groups: dict[Key, list[Key]] = {}
    for key in order:  # dependency order, so every group's members are ordered too
        if key in loads:
            groups[key] = [key]
        elif key in kept:
            root = key
            while root in origin:
                root = origin[root]
            groups.setdefault(root, []).append(key)
    result: dict[Key, GraphNode] = {}
    for root, members in groups.items():
        if len(members) > 1 and root in kept:
            inner = set(members)
            external = sorted({d for k in members for d in kept[k].dependencies} - inner,
                              key=str)
            group_specs = {k: specs[k] for k in members if k in specs}
            result[root] = Task(root, run_group, tuple((k, kept[k]) for k in members), root,
                                tuple(external), group_specs,
                                *(TaskRef(d) for d in external))
            continue
        for key in members:
            result[key] = _single(key, kept[key], specs.get(key))
    return result


def _single(key: Key, node: GraphNode, spec: StoreSpec | None) -> GraphNode:
    """An operation that runs as a task of its own: wrapped if it may be stored."""
    if spec is not None and isinstance(node, Task):
        kwargs = Dict(node.kwargs) if node.kwargs else None
        return Task(key, run_and_store, spec, node.func, kwargs, *node.args)
    return node
