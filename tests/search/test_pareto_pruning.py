"""Multi-objective pruning (search.pruners._dominated): the rule on hand-made epoch vectors in an
in-memory study, rank 0's reporter writing and asking it, and a function objective using it."""

from __future__ import annotations

import random
import textwrap
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from search.backends._objectives import run_function_trial
from search.pruners._dominated import DominatedPruner
from search.strategies._registry import pruner_spec
from search.studyfile._study_file import parse_study
from tests.cli_helpers import run_search
from training.contract import VECTOR_ATTR, open_storage
from training.session import CONTINUE, STOP, OptunaReporter

ACC_PARAMS = ["maximize", "minimize"]  # val_accuracy, n_params


def dominates(u: list[float], v: list[float], directions: list[str]) -> bool:
    """``u`` dominates ``v``, written out here rather than taken from the code under test."""
    signs = [1.0 if d == "minimize" else -1.0 for d in directions]
    a = [s * x for s, x in zip(signs, u, strict=True)]
    b = [s * x for s, x in zip(signs, v, strict=True)]
    return a != b and all(x <= y for x, y in zip(a, b, strict=True))


def _key(epoch: int) -> str:
    return f"{VECTOR_ATTR}{epoch}"


def _study(directions: list[str], others: list[list[float]], *, epoch: int = 1,
           state: TrialState = TrialState.COMPLETE) -> optuna.Study:
    """An in-memory study holding ``others`` as trials with a vector at ``epoch``."""
    study = optuna.create_study(directions=directions)
    for vector in others:
        _add(study, {epoch: vector}, state)
    return study


def _add(study: optuna.Study, vectors: dict[int, list[float]],
         state: TrialState = TrialState.COMPLETE) -> None:
    last = vectors[max(vectors)]
    study.add_trial(create_trial(
        state=state,
        values=last if state is TrialState.COMPLETE else None,
        user_attrs={_key(e): v for e, v in vectors.items()},
    ))


def _judge(study: optuna.Study, pruner: DominatedPruner, vectors: dict[int, list[float]]) -> bool:
    """A new running trial with ``vectors`` (epoch -> vector): does ``pruner`` stop it now?"""
    trial = study.ask()
    for epoch, vector in vectors.items():
        trial.set_user_attr(_key(epoch), vector)
    return pruner.prune(study, study.trials[trial.number])


def _pruner(fraction: float = 0.5, startup: int = 0, warmup: int = 1) -> DominatedPruner:
    return DominatedPruner(fraction=fraction, n_startup_trials=startup, n_warmup_steps=warmup)


@pytest.mark.unit
def test_a_trial_most_others_dominate_is_stopped_one_they_do_not_goes_on() -> None:
    others = [[0.9, 100.0], [0.8, 50.0], [0.95, 80.0], [0.85, 90.0]]
    assert _judge(_study(ACC_PARAMS, others), _pruner(), {1: [0.7, 120.0]})
    # Smaller than all of them: on the front, never stopped, however bad its accuracy.
    assert not _judge(_study(ACC_PARAMS, others), _pruner(), {1: [0.1, 10.0]})


@pytest.mark.unit
def test_the_fraction_is_a_threshold_on_the_share_of_others_that_dominate() -> None:
    # [0.7, 100] is dominated by exactly 2 of these 4 (the first two).
    others = [[0.9, 100.0], [0.8, 60.0], [0.6, 50.0], [0.95, 200.0]]
    for fraction, stopped in [(0.25, True), (0.5, True), (0.51, False), (0.75, False), (1.0, False)]:
        got = _judge(_study(ACC_PARAMS, others), _pruner(fraction), {1: [0.7, 100.0]})
        assert got is stopped, fraction
    everyone = [[0.9, 50.0]] * 4
    assert _judge(_study(ACC_PARAMS, everyone), _pruner(1.0), {1: [0.7, 100.0]})


@pytest.mark.unit
def test_equal_vectors_do_not_dominate_each_other() -> None:
    assert not _judge(_study(ACC_PARAMS, [[0.7, 100.0]] * 5), _pruner(0.01), {1: [0.7, 100.0]})


@pytest.mark.unit
def test_flipping_a_direction_changes_the_decision() -> None:
    others = [[0.9, 100.0], [0.95, 200.0], [0.92, 150.0]]
    candidate = {1: [0.7, 50.0]}  # the smallest: on the front when n_params is minimised
    assert not _judge(_study(ACC_PARAMS, others), _pruner(), candidate)
    assert _judge(_study(["maximize", "maximize"], others), _pruner(), candidate)
    # Minimising the accuracy too: the candidate dominates all of them.
    assert not _judge(_study(["minimize", "minimize"], others), _pruner(0.01), candidate)
    # Best accuracy (minimised) and worst size (maximised): on the front again.
    assert not _judge(_study(["minimize", "maximize"], others), _pruner(0.01), candidate)
    # The same vectors with the accuracy flipped: a candidate that was on the front is stopped.
    weak = {1: [0.99, 300.0]}
    assert not _judge(_study(ACC_PARAMS, others), _pruner(0.01), weak)
    assert _judge(_study(["minimize", "minimize"], others), _pruner(), weak)


@pytest.mark.unit
def test_no_trial_on_the_front_at_its_epoch_is_ever_stopped() -> None:
    rng = random.Random(7)
    for _ in range(20):
        vectors = [[rng.random(), rng.random(), rng.random()] for _ in range(12)]
        directions = [rng.choice(["maximize", "minimize"]) for _ in range(3)]
        for i, mine in enumerate(vectors):
            rest = vectors[:i] + vectors[i + 1:]
            count = sum(dominates(u, mine, directions) for u in rest)
            for fraction in (0.01, 0.3, 0.5, 1.0):
                stopped = _judge(_study(directions, rest), _pruner(fraction), {1: mine})
                assert stopped is (count >= fraction * len(rest)), (mine, rest, fraction)
                if count == 0:  # on the front
                    assert not stopped


@pytest.mark.unit
def test_warmup_and_startup_hold_the_rule_back() -> None:
    others = [[0.9, 50.0]] * 3
    weak = [0.5, 100.0]
    assert not _judge(_study(ACC_PARAMS, others, epoch=1), _pruner(warmup=2), {1: weak})
    assert _judge(_study(ACC_PARAMS, others, epoch=2), _pruner(warmup=2), {1: weak, 2: weak})
    assert not _judge(_study(ACC_PARAMS, others), _pruner(startup=4), {1: weak})
    assert _judge(_study(ACC_PARAMS, others), _pruner(startup=3), {1: weak})
    # Startup counts completed trials only; pruned and running ones still count as others.
    study = _study(ACC_PARAMS, others[:2], state=TrialState.PRUNED)
    study.ask().set_user_attr(_key(1), others[2])
    assert not _judge(study, _pruner(startup=1), {1: weak})
    assert _judge(study, _pruner(startup=0), {1: weak})


@pytest.mark.unit
def test_only_the_trials_that_reached_the_epoch_count_and_failed_ones_never() -> None:
    study = _study(ACC_PARAMS, [[0.6, 100.0]] * 2)  # at epoch 1 only: a weak pair
    _add(study, {1: [0.9, 50.0], 2: [0.9, 50.0]})
    _add(study, {1: [0.9, 50.0], 2: [0.9, 50.0]}, TrialState.FAIL)
    _add(study, {1: [0.9, 50.0], 2: [0.9, 50.0]}, TrialState.FAIL)
    # At epoch 2 only one other trial counts, and it dominates: stopped (1 >= 0.5 * 1).
    assert _judge(study, _pruner(), {1: [0.8, 60.0], 2: [0.8, 60.0]})
    # At epoch 1 three count and only one dominates; the failed ones would tip it.
    assert not _judge(study, _pruner(), {1: [0.8, 60.0]})


@pytest.mark.unit
def test_a_non_finite_entry_is_the_worst_value() -> None:
    others = [[0.5, 100.0]] * 3
    assert _judge(_study(ACC_PARAMS, others), _pruner(), {1: [None, 100.0]})  # type: ignore[list-item]
    unfinished = _study(ACC_PARAMS, [[None, 100.0]] * 3, state=TrialState.PRUNED)  # type: ignore[list-item]
    assert not _judge(unfinished, _pruner(), {1: [0.1, 100.0]})


@pytest.mark.unit
@pytest.mark.parametrize("direction", ["maximize", "minimize"])
@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75])
def test_with_one_objective_it_is_optunas_percentile_pruner(direction: str, fraction: float) -> None:
    # Five completed others: numpy's percentile of them at 25/50/75 is one of the five values,
    # so both rules draw the same line and must agree on every candidate.
    rng = random.Random(int(fraction * 100) + len(direction))
    ours = _pruner(fraction, startup=5, warmup=1)
    optunas = optuna.pruners.PercentilePruner(100 * fraction, n_startup_trials=5, n_warmup_steps=1)
    stops = 0
    for _ in range(40):
        study = optuna.create_study(direction=direction)
        for _ in range(5):
            v = rng.random()
            study.add_trial(create_trial(value=v, intermediate_values={1: v}))
        trial = study.ask()
        trial.report(rng.random(), 1)
        frozen = study.trials[-1]
        assert ours.prune(study, frozen) is bool(optunas.prune(study, frozen))
        stops += ours.prune(study, frozen)
    assert 0 < stops < 40


@pytest.mark.unit
def test_options_are_checked_and_name_the_argument() -> None:
    with pytest.raises(ValueError, match=r"^fraction: must be in \(0, 1\], got 0"):
        DominatedPruner(fraction=0)
    with pytest.raises(ValueError, match="^n_startup_trials: "):
        DominatedPruner(n_startup_trials=-1)


@pytest.mark.unit
def test_rank_zeros_reporter_records_each_epochs_vector_and_asks_the_rule(tmp_path: Path) -> None:
    journal = str(tmp_path / "s.journal")
    sf = parse_study({"name": "mo", "metric": ["val_accuracy", "n_params"],
                      "pruner": {"name": "dominated", "startup_trials": 2}})
    spec = pruner_spec(sf.pruner.name, sf.pruner.spec_options(3)).to_json()
    study = optuna.create_study(study_name="mo", storage=open_storage(journal),
                                directions=sf.directions)
    for vector in ([0.9, 100.0], [0.95, 80.0]):
        _add(study, {1: vector, 2: vector})

    def reporter() -> OptunaReporter:
        return OptunaReporter(study_name="mo", storage_url=journal,
                              trial_id=study.ask()._trial_id, pruner=spec,
                              objectives=["val_accuracy", "n_params"])

    good, weak = reporter(), reporter()
    row = {"val_accuracy": 0.97, "n_params": 90.0, "val_loss": 0.1}
    assert good.decide(1, row) == CONTINUE
    assert weak.decide(1, {**row, "val_accuracy": 0.5, "n_params": 120.0}) == STOP
    assert good.decide(2, {**row, "val_accuracy": float("nan")}) == STOP  # NaN: worst
    attrs = {t.number: t.user_attrs for t in optuna.load_study(
        study_name="mo", storage=open_storage(journal)).trials}
    assert attrs[2][_key(1)] == [0.97, 90.0] and attrs[2][_key(2)] == [None, 90.0]
    assert attrs[3][_key(1)] == [0.5, 120.0] and _key(2) not in attrs[3]


FUNCTION = """
def objective(params, report):
    for step in range(1, 4):
        report(step, {"acc": params["acc"], "size": 10.0})
    return [params["acc"], 10.0]


def wrong_shape(params, report):
    report(1, 0.5)
    return [0.5, 1.0]
"""


@pytest.mark.unit
def test_a_function_objective_reports_vectors_and_is_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "vec_objective.py").write_text(textwrap.dedent(FUNCTION))
    monkeypatch.chdir(tmp_path)
    journal = str(tmp_path / "s.journal")
    sf = parse_study({"name": "fo", "objective": "vec_objective:objective",
                      "metric": ["acc", "size"], "direction": ["maximize", "minimize"],
                      "pruner": {"name": "dominated", "startup_trials": 2}})
    study = optuna.create_study(study_name="fo", storage=open_storage(journal),
                                directions=sf.directions)

    def run(acc: float, objective: str = "vec_objective:objective") -> dict:
        trial = study.ask()
        result = run_function_trial({
            "objective": objective, "params": {"acc": acc}, "objectives": sf.objectives,
            "study_name": "fo", "storage_url": journal, "trial_id": trial._trial_id,
            "pruner": pruner_spec(sf.pruner.name, sf.pruner.spec_options(3)).to_json(),
            "report": True, "noise_seed": 0, "sys_path": [str(tmp_path)],
        })
        if result["state"] == "complete":
            study.tell(trial, [result["values"]["acc"], result["values"]["size"]])
        return result

    assert run(0.9)["state"] == "complete" and run(0.8)["state"] == "complete"
    assert run(0.95)["state"] == "complete"
    pruned = run(0.5)
    assert pruned == {**pruned, "state": "pruned", "exit_reason": "pruned after step 1"}
    assert study.trials[3].user_attrs == {_key(1): [0.5, 10.0]}
    failed = run(0.5, "vec_objective:wrong_shape")
    assert failed["state"] == "failed"
    assert "report(1, value) got one number for ['acc', 'size']" in failed["exit_reason"]


@pytest.mark.mpi
def test_a_real_two_objective_study_stops_only_trials_most_others_dominate(
    tmp_path: Path, write_study: Callable[..., Path]
) -> None:
    # digits, accuracy vs size: widths 8 to 128 and an lr range whose low end barely learns in
    # three epochs, so a wide slow trial is dominated by the smaller ones that learn faster
    # (with these seeds 3 of 18 trials are stopped, e.g. hidden 47 at lr 0.005 after epoch 1,
    # dominated by 5 of the 6 before it).
    fraction, startup, warmup, epochs = 0.5, 3, 1, 3
    write_study(
        top=f'metric = ["val_accuracy", "n_params"]\n[pruner]\nname = "dominated"\n'
            f"fraction = {fraction}\nstartup_trials = {startup}\nwarmup_epochs = {warmup}",
        training={"epochs": str(epochs), "ranks": "1"},
        tail='[strategy]\nname = "random"\nseed = 3\n[budget]\ntrials = 18\n'
             "[launcher]\nwarm = true\n[space]\n"
             'hidden = { type = "int", low = 8, high = 128, log = true }\n'
             'lr = { type = "float", low = 0.001, high = 0.3, log = true }',
    )
    code, out, err = run_search("run", "study.toml", "--storage", "s.journal", "--no-progress",
                                cwd=tmp_path)
    assert code == 0, out + err
    # Read back with plain Optuna: one trial at a time (concurrency 1), so the trials that
    # counted at trial k's epoch e are exactly the earlier ones that reached e.
    trials = optuna.load_study(study_name="t", storage=open_storage(str(tmp_path / "s.journal"))
                               ).get_trials()
    assert len(trials) == 18
    assert {t.state for t in trials} <= {TrialState.COMPLETE, TrialState.PRUNED}
    directions = ["maximize", "minimize"]
    pruned = [t for t in trials if t.state is TrialState.PRUNED]
    assert pruned, "the dominated pruner stopped no trial"
    for t in trials:
        history = t.user_attrs["history"]
        vectors = {k: v for k, v in t.user_attrs.items() if k.startswith(VECTOR_ATTR)}
        assert vectors == {_key(r["epoch"]): [r["val_accuracy"], r["n_params"]] for r in history}
        last = history[-1]["epoch"]
        assert (last < epochs) is (t.state is TrialState.PRUNED)
        earlier = trials[:t.number]
        for epoch in range(1, last + 1):
            mine = vectors[_key(epoch)]
            others = [u.user_attrs[_key(epoch)] for u in earlier if _key(epoch) in u.user_attrs]
            beaten_by = sum(dominates(u, mine, directions) for u in others)
            judged = (epoch >= warmup and bool(others)
                      and sum(u.state is TrialState.COMPLETE for u in earlier) >= startup)
            stop = judged and beaten_by >= fraction * len(others)
            if epoch < last:
                assert not stop, (t.number, epoch, mine, others)  # it went on: not dominated
            elif t.state is TrialState.PRUNED:
                assert stop, (t.number, epoch, mine, others)
                assert beaten_by > 0  # not on the Pareto front of its epoch
