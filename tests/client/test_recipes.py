"""Recipes and slots without a server (docs/design/hashing.md, "Recipes and why"): what a
recipe holds (digests and names, never values), its bounds, and slots that stay put
across edits while telling alike tasks apart."""

from __future__ import annotations

import json

import dask

from client_lib.core.signing import SigningKey
from client_lib.hashing.recipes import MAX_PARTS, recipe_records
from client_lib.plan.hashed import hash_collections

SECRET = "hunter2-very-secret-value"


def _records(*collections, namespace: str = "default", key: SigningKey | None = None
             ) -> dict:
    hashed = hash_collections(list(collections), namespace=namespace, signing_key=key)
    return {hashed.hashes.labels.get(k, str(k)) + str(i): r for i, (k, r) in enumerate(
        recipe_records(hashed.m.graph, hashed.order, hashed.m.keys, hashed.hashes,
                       namespace, hashed.m, signing_key=key).items())}


def connect(password, n):
    return len(password) + n


def many(*values):
    return sum(values)


def test_a_recipe_names_parts_by_digest_never_by_value(tmp_path):
    data = tmp_path / "table.csv"
    data.write_text("a\n1\n")
    task = dask.delayed(connect)(SECRET, str(data))
    (record,) = _records(task).values()
    text = json.dumps(record)
    assert SECRET not in text
    recipe = record["recipe"]
    assert [name for name, _ in recipe["a"]] == ["0", "1"]
    assert recipe["i"] == [[str(data), 4, data.stat().st_mtime_ns]]
    assert recipe["f"][0][0].endswith("connect") and recipe["f"][1][0].endswith("connect body")
    assert all(len(d) == 16 for _, d in recipe["f"] + recipe["a"])


def test_slots_survive_edits_and_tell_alike_tasks_apart():
    def build(offset):
        parts = [dask.delayed(connect)("x" * (i + offset), i) for i in range(3)]
        return dask.delayed(many)(*parts)

    def by_n(records: dict) -> dict:  # each part by its unchanged argument n
        return {str(r["recipe"]["a"][1:]): (r["slot"], r["hash"]) for r in records.values()}

    before, after = by_n(_records(build(0))), by_n(_records(build(5)))
    assert before.keys() == after.keys()
    assert all(before[n][0] == after[n][0] and before[n][1] != after[n][1] for n in before)
    assert len({slot for slot, _ in before.values()}) == 4  # three alike, numbered
    other = by_n(_records(build(0), namespace="other"))
    assert not {s for s, _ in other.values()} & {s for s, _ in before.values()}


def test_recipes_are_bounded():
    task = dask.delayed(many)(*range(3 * MAX_PARTS))
    (record,) = _records(task).values()
    assert len(record["recipe"]["a"]) == MAX_PARTS
    assert len(json.dumps(record["recipe"])) < 8192


def test_with_a_signing_key_the_part_digests_are_keyed():
    task = dask.delayed(connect)("1234", 1)
    (plain,) = _records(task).values()
    (keyed,) = _records(task, key=SigningKey("k" * 40)).values()
    (again,) = _records(task, key=SigningKey("k" * 40)).values()
    assert keyed["recipe"] == again["recipe"]
    assert keyed["recipe"]["a"][0][1] != plain["recipe"]["a"][0][1]
    assert keyed["hash"] != plain["hash"] and keyed["slot"] == plain["slot"]
