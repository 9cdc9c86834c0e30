"""search/driver/_study.py's requeue and comparison rules in process (issue 33: its own tests
ran them through the CLI, in subprocesses, where a slip in a continuation's chain or a retry's
count could not show): requeued continuations keep their lineage and checkpoint, retries stop at
the budget, lineage work is carried, a study file's changes are classified."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from search.driver._study import (
    ATTEMPT_ATTR,
    RESUME_FROM_ATTR,
    RETRY_ATTR,
    _algorithms,
    _changes,
    _flat,
    finished_configurations,
    lineage_of,
    requeue,
    resume_point,
)
from search.pruners._promotion import LINEAGE_ATTR, LINEAGE_EPOCHS_ATTR, RESUME_OF_ATTR
from training.contract import CHECKPOINT_ATTR

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

X = {"x": FloatDistribution(0.0, 1.0)}


def _running(study: optuna.Study, **attrs: object) -> optuna.Trial:
    trial = study.ask(X)
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    return trial


def _queued(study: optuna.Study) -> dict:
    (waiting,) = study.get_trials(states=(TrialState.WAITING,))
    return waiting.user_attrs


def test_a_requeued_continuation_keeps_its_lineage_parent_and_newest_checkpoint() -> None:
    study = optuna.create_study()
    trial = _running(study, **{
        RESUME_OF_ATTR: 3, LINEAGE_ATTR: 1, ATTEMPT_ATTR: 1, LINEAGE_EPOCHS_ATTR: 4,
        RESUME_FROM_ATTR: {"id": "old", "epoch": 4, "trial": 3},
        CHECKPOINT_ATTR: {"id": "new", "epoch": 7}})
    note = requeue(study, trial, "worker lost", max_retries=2)
    assert note == ("worker lost; parameters re-queued from its epoch-7 checkpoint "
                    "(attempt 2 of 3)")
    attrs = _queued(study)
    assert attrs[RETRY_ATTR] == trial.number and attrs[ATTEMPT_ATTR] == 2
    assert attrs[LINEAGE_ATTR] == 1 and attrs[RESUME_OF_ATTR] == 3
    assert attrs[RESUME_FROM_ATTR] == {"id": "new", "epoch": 7, "trial": trial.number}
    assert attrs[LINEAGE_EPOCHS_ATTR] == 4 + 3  # its own epochs 5, 6, 7 were kept
    assert study.trials[trial.number].user_attrs["detol:requeued"] is True


def test_a_retry_without_its_own_checkpoint_resumes_where_it_started() -> None:
    study = optuna.create_study()
    inherited = {"id": "old", "epoch": 4, "trial": 0}
    trial = _running(study, **{RESUME_FROM_ATTR: inherited, LINEAGE_EPOCHS_ATTR: 4})
    assert requeue(study, trial, "lost", max_retries=1).endswith(
        "re-queued from its epoch-4 checkpoint (attempt 2 of 2)")
    attrs = _queued(study)
    assert attrs[RESUME_FROM_ATTR] == inherited and attrs[LINEAGE_EPOCHS_ATTR] == 4
    assert attrs[LINEAGE_ATTR] == trial.number and RESUME_OF_ATTR not in attrs


def test_a_first_run_from_scratch_counts_its_epochs_from_one() -> None:
    study = optuna.create_study()
    trial = _running(study, **{CHECKPOINT_ATTR: {"id": "c", "epoch": 3}})
    requeue(study, trial, "lost", max_retries=1)
    assert _queued(study)[LINEAGE_EPOCHS_ATTR] == 3


def test_retries_stop_at_the_budget() -> None:
    study = optuna.create_study()
    trial = _running(study, **{ATTEMPT_ATTR: 3})
    assert requeue(study, trial, "lost", max_retries=2) == (
        "lost; not re-queued (attempt 3, budget.max_retries=2)")
    assert study.get_trials(states=(TrialState.WAITING,)) == []
    plain = _running(study)
    assert requeue(study, plain, "lost", max_retries=1) == (
        "lost; parameters re-queued (attempt 2 of 2)")
    assert RESUME_FROM_ATTR not in _queued(study)


def test_resume_point_and_lineage_of() -> None:
    assert resume_point(5, {CHECKPOINT_ATTR: {"id": "a", "epoch": "2"}}) == {
        "id": "a", "epoch": 2, "trial": 5}
    inherited = {"id": "b", "epoch": 1, "trial": 2}
    assert resume_point(5, {CHECKPOINT_ATTR: {"id": "", "epoch": 2},
                            RESUME_FROM_ATTR: inherited}) == inherited
    assert resume_point(5, {CHECKPOINT_ATTR: "x"}) is None and resume_point(5, {}) is None
    assert lineage_of(5, {}) == 5 and lineage_of(5, {LINEAGE_ATTR: "2"}) == 2


def test_finished_configurations_leave_out_continuations_and_unfinished_trials() -> None:
    study = optuna.create_study()
    # three configurations, two continuations: a count of the one can not pass for the other
    for state, attrs in ((TrialState.COMPLETE, {}), (TrialState.PRUNED, {}),
                         (TrialState.COMPLETE, {RESUME_OF_ATTR: 1}), (TrialState.FAIL, {}),
                         (TrialState.PRUNED, {RESUME_OF_ATTR: 0}), (TrialState.PRUNED, {})):
        study.add_trial(create_trial(state=state, params={"x": 0.5}, distributions=X,
                                     value=1.0 if state == TrialState.COMPLETE else None,
                                     user_attrs=attrs))
    study.ask(X)  # running
    assert finished_configurations(study) == 3


def test_changes_flatten_and_skip_what_cannot_change_a_trial() -> None:
    assert _flat({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}
    assert _flat(5, "x.") == {"x": 5}
    old = {"training": {"algorithm": "sync", "epochs": 3}, "space": {}}
    assert _changes(old, {"training": {"algorithm": "sync", "epochs": 4}, "space": {}}) == [
        ("training.epochs", 3, 4)]
    # send_every is read by asgd only: no trial of a sync study can differ by it
    assert _changes(old, {"training": {"algorithm": "sync", "epochs": 3, "send_every": 9}}) == []
    asgd = {"training": {"algorithm": "asgd", "epochs": 3}}
    assert _changes(asgd, asgd | {"training": {"algorithm": "asgd", "epochs": 3,
                                              "send_every": 9}}) == [
        ("training.send_every", None, 9)]
    assert _algorithms({"space": {"algorithm": {"choices": ["asgd", "localsgd"]}}}) == {
        "sync", "asgd", "localsgd"}
    assert _algorithms({"training": {"algorithm": "asgd"}, "space": {"algorithm": 3}}) == {"asgd"}


def test_open_study_refuses_a_changed_file_and_records_an_allowed_change(tmp_path) -> None:
    import pytest

    from search import StudyError, load_study_file, open_study
    from search.driver._study import CHANGES_ATTR, STUDY_ATTR
    from training.contract import open_storage

    def study_file(name: str, body: str):
        path = tmp_path / name
        path.write_text('name = "q"\n' + body)
        return load_study_file(path)

    storage = open_storage(str(tmp_path / "j"))
    train = '[training]\ndataset = "digits"\nepochs = 6\nranks = 1\n'
    study = open_study(study_file("a.toml", train), storage)
    assert study.user_attrs[STUDY_ATTR]["training"]["epochs"] == 6
    default = study.user_attrs[STUDY_ATTR]["strategy"]["name"]
    other = "random" if default != "random" else "tpe"
    with pytest.raises(StudyError, match=r"study 'q' in its storage holds 0 trials made with "
                       r"another study file \(training.epochs: 6 -> 1\)"):
        open_study(study_file("b.toml", train.replace("epochs = 6", "epochs = 1")), storage)
    again = open_study(study_file("c.toml", train + f'[strategy]\nname = "{other}"\n'), storage)
    [change] = again.user_attrs[CHANGES_ATTR]
    assert change["before_trial"] == 0 and change["changes"] == [
        f'strategy.name changed from "{default}" to "{other}"']
    assert again.user_attrs[STUDY_ATTR]["strategy"]["name"] == other


def test_tell_paused_leaves_a_promotable_pruned_trial_with_its_reason() -> None:
    from search.driver._study import tell_paused

    study = optuna.create_study()
    trial = _running(study)
    trial.report(0.5, 3)
    tell_paused(study, trial, 3, "driver x died")
    t = study.trials[trial.number]
    assert t.state is TrialState.PRUNED and t.user_attrs["detol:paused_at"] == 3
    assert t.user_attrs["exit_reason"] == (
        "paused after epoch 3 (driver x died; its checkpoint is kept and the pruner asked again)")


def test_open_study_uses_the_study_files_strategy() -> None:
    import pathlib
    import tempfile

    from search import load_study_file, open_study
    from search.strategies._registry import build_sampler  # noqa: F401  (the registry in use)
    from training.contract import open_storage

    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "s.toml"
        path.write_text('name = "r"\n[strategy]\nname = "random"\n')
        study = open_study(load_study_file(path), open_storage(str(pathlib.Path(d) / "j")))
        assert not isinstance(study.sampler, optuna.samplers.TPESampler)  # Optuna's default
        assert "random" in type(study.sampler).__name__.lower()
