"""Tasks that draw from a random generator (issue 27, case 5): each draw advances the
generator, so a cached result would stand in for a draw that never happened and every
later draw would repeat an earlier one. Run cold and then warm in fresh processes
against a real cache server, ``cached_compute`` must give what plain ``dask.compute``
gives in the same process, and never serve those tasks from the cache.
"""

from __future__ import annotations

import pytest

from tests._compare import assert_same
from tests.correctness._fresh import namespace, run_scenario
from tests.correctness._round3_scenarios import GENERATORS

pytestmark = pytest.mark.slow  # fresh processes


def test_tasks_drawing_from_a_generator_draw_anew_on_every_run(cache_server, tmp_path):
    ns = namespace("round3")
    for phase in ("cold", "warm"):
        result = run_scenario(cache_server, tmp_path / "generators", "generators",
                              GENERATORS, namespace=ns)
        assert result["value"].keys() == result["expected"].keys()
        for name, value in result["value"].items():
            assert_same(value, result["expected"][name], f"{phase}: {name}")
            first, second = value
            with pytest.raises(AssertionError):  # two draws, not one draw twice
                assert_same(first, second)
        for report in result["reports"]:
            assert report["loaded"] == 0, (phase, report)
            assert report["volatile"] >= 1, (phase, report)
            assert any("random generator" in reason  # reasons are counted by text
                       for reason in report["volatile_reasons"]), report
