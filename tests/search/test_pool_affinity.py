"""A continuation on warm pools goes back to its parent's Dask worker when that worker is idle
(its pool holds the paused state in memory: training.jobs._regroup), and anywhere otherwise."""

from __future__ import annotations

from types import SimpleNamespace

import optuna
import pytest

from search.driver._driver import Driver
from search.pruners._promotion import RESUME_OF_ATTR
from training.contract import TrialSpec

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


class _Client:
    def __init__(self, processing: dict[str, tuple[str, ...]]) -> None:
        self._processing = processing

    def processing(self) -> dict[str, tuple[str, ...]]:
        return self._processing


def _affinity(processing: dict[str, tuple[str, ...]], *, warm: bool = True,
              continuation: bool = True) -> dict:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    parent = study.ask()
    parent.set_user_attr("dask_worker", "tcp://w1")
    study.tell(parent, state=optuna.trial.TrialState.PRUNED)
    attrs = {RESUME_OF_ATTR: parent.number} if continuation else {}
    spec = TrialSpec(config={}, warm=warm, pool_ranks=4)
    me = SimpleNamespace(study=study, client=_Client(processing), simulated=False)
    return Driver._affinity(me, attrs, spec)  # type: ignore[arg-type]


def test_a_continuation_goes_back_to_its_parents_worker_only_when_it_is_idle() -> None:
    back = {"workers": ["tcp://w1"], "allow_other_workers": True}
    assert _affinity({"tcp://w1": (), "tcp://w2": ()}) == back
    assert _affinity({"tcp://w1": ("trial-9",), "tcp://w2": ()}) == {}  # busy: never wait
    assert _affinity({"tcp://w2": ()}) == {}  # the worker is gone
    assert _affinity({"tcp://w1": ()}, warm=False) == {}  # cold jobs: no pool to go back to
    assert _affinity({"tcp://w1": ()}, continuation=False) == {}
