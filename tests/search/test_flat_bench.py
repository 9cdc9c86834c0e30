"""The flat-table benchmark's harness (benchmarks/flat.py, benchmarks/_common/flat_peers.py): the
peers see the noise seeds our driver uses, the incumbent is picked on what was observed, and
the docs' table never prints a mean over fewer tables than the others as if comparable. No peer
package is needed: the one real peer run here is Optuna's TPE (a dependency)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from search.simulated import _flat

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _run(opt, tb, seed, conc, regret):
    """A finished run as flat.py records it (only what the summaries read)."""
    return {"optimizer": opt, "table": tb, "seed": seed, "concurrency": conc, "regret": regret,
            "regret_at_50": regret, "ms_per_eval": 1.0, "load1": 1.0, "wall_s": 1.0,
            "error": None}


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import flat
        from _common import flat_peers

        yield flat, flat_peers
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.unit
def test_a_peer_observes_the_noise_seeds_of_our_driver(bench):
    _, flat_peers = bench
    run = flat_peers.run_peer("optuna-tpe", "kc1", seed=3, budget=12)
    assert len(run["keys"]) == len(run["observed"]) == 12
    for i, (key, value) in enumerate(zip(run["keys"], run["observed"], strict=True)):
        # evaluation i of run seed 3: noise seed 3 * 1,000,003 + i, as search.Driver draws it
        assert value == _flat.observe(key, "kc1", 3 * 1_000_003 + i)[0]
    assert 0.0 <= run["optimizer_s"] <= run["wall_s"]


@pytest.mark.unit
def test_the_incumbent_is_the_best_observed_scored_by_its_seed_mean(bench):
    _, flat_peers = bench
    t = _flat.table("kc1")
    order = t.mean.argsort()
    keys = [k for k, r in t.rows.items() if r in (order[0], order[-1])]
    worse, better = sorted(keys, key=lambda k: _flat.seed_mean(k, "kc1"))
    # the worse configuration observed luckily high: it is the incumbent, scored by its mean
    curve = flat_peers.incumbent_curve([better, worse], [0.5, 0.9], "kc1")
    assert curve == [_flat.seed_mean(better, "kc1"), _flat.seed_mean(worse, "kc1")]


@pytest.mark.unit
def test_the_docs_table_gives_no_mean_over_fewer_tables(bench):
    flat, _ = bench
    entry = {"regret": 1.0, "stderr": 0.1, "seeds": 2, "ms_per_eval": 5.0}
    doc = {
        "settings": {"tables": ["kc1", "car"]},
        "yardsticks": {tb: {"random_100_noisy_regret": 2.0} for tb in ("kc1", "car")},
        "results": {
            "full": {"sequential": {"kc1": entry, "car": entry, "mean": {
                "regret": 1.0, "stderr": 0.07, "tables": 2, "ms_per_eval": 5.0}}},
            "part": {"sequential": {"kc1": entry, "mean": {
                "regret": 1.0, "stderr": 0.1, "tables": 1, "ms_per_eval": 5.0}}},
        },
    }
    rows = {line.split(" (")[0].strip("| "): line for line in flat.markdown(doc).splitlines()}
    assert "| 1.00 ± 0.07 |" in rows["full"]
    assert "(1 of 2 tables)" in rows["part"] and "1.00 ± 0.10" not in rows["part"]


@pytest.mark.unit
def test_the_concurrency_gap_pairs_seeds_that_ran_every_table_in_both_modes(bench):
    flat, _ = bench

    def run(tb, seed, conc, regret):
        return {"table": tb, "seed": seed, "concurrency": conc, "regret": regret, "error": None}

    runs = [run(tb, s, c, {1: 1.0, 8: 1.0 + 0.1 * (s + 1)}[c] + (tb == "car"))
            for tb in ("kc1", "car") for s in (0, 1) for c in (1, 8)]
    runs.append(run("kc1", 2, 8, 50.0))  # seed 2 ran one mode of one table: left out
    gap = flat.concurrency_gap(runs, ["kc1", "car"])
    assert gap["seeds"] == 2 and gap["regret"] == pytest.approx(0.15)
    assert gap["stderr"] == pytest.approx(0.05)


@pytest.mark.unit
def test_a_variant_that_acts_only_concurrently_shares_its_twins_sequential_runs(bench):
    flat, _ = bench

    runs = [_run("tpe", tb, s, 1, 1.0 + s) for tb in ("kc1", "car") for s in (0, 1)]
    runs += [_run("tpe:constant_liar=false", tb, s, 8, 3.0 + s) for tb in ("kc1", "car")
             for s in (0, 1)]
    runs.append(_run("tpe:constant_liar=false", "kc1", 0, 1, 99.0))  # ignored: the twin's count
    out = flat.summarise(runs, ["kc1", "car"], ["tpe", "tpe:constant_liar=false"],
                         {"tpe:constant_liar=false": "tpe"})
    liar_off = out["tpe:constant_liar=false"]
    assert liar_off["sequential"]["kc1"]["regret"] == out["tpe"]["sequential"]["kc1"]["regret"]
    assert liar_off["sequential"]["kc1"]["seeds"] == 2
    assert liar_off["gap"] == {"regret": 2.0, "stderr": 0.0, "seeds": 2}
    assert "gap" not in out["tpe"]  # the twin itself ran no 8-running seed


@pytest.mark.unit
def test_a_twin_runs_only_with_8_running_and_peers_only_sequentially(bench):
    flat, _ = bench
    twins = {"tpe:constant_liar=false": "tpe"}
    assert [flat.runs_in("tpe:constant_liar=false", m, twins, None) for m in flat.MODES] == [
        False, True]
    assert [flat.runs_in("tpe", m, twins, None) for m in flat.MODES] == [True, True]
    assert [flat.runs_in("hebo", m, twins, None) for m in flat.MODES] == [True, False]
    assert not flat.runs_in("gp", "concurrent", twins, ["tpe"])


@pytest.mark.unit
def test_the_peers_python_is_found_from_any_directory_and_a_missing_one_is_refused(
        bench, tmp_path, monkeypatch):
    flat, _ = bench
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)  # as a venv's python: a link out of the venv
    monkeypatch.chdir(tmp_path)
    assert flat.peers_python("venv/bin/python") == str(venv / "python")  # absolute, not resolved
    with pytest.raises(ValueError, match=r"^no such file 'venv/bin/nope' \(benchmarks/"):
        flat.peers_python("venv/bin/nope")
    with pytest.raises(SystemExit):
        flat.main(["--strategies", "hebo", "--peers-python", "venv/bin/nope"])


@pytest.mark.unit
def test_every_mean_and_gap_is_also_given_without_the_table_of_ties(bench):
    flat, _ = bench
    assert flat.TIED == ("car",)

    def run(tb, seed, conc, regret):
        return _run("predictor", tb, seed, conc, regret)

    regret = {("kc1", 1): (1.0, 2.0), ("kc1", 8): (1.5, 2.5), ("car", 1): (100.0, 200.0),
              ("car", 8): (300.0, 400.0)}
    runs = [run(tb, s, c, regret[tb, c][s]) for tb, c in regret for s in (0, 1)]
    out = flat.summarise(runs, ["kc1", "car"], ["predictor"])["predictor"]
    assert out["sequential"]["mean"]["regret"] == pytest.approx(75.75)
    assert out["sequential"]["mean_without_car"]["regret"] == pytest.approx(1.5)
    assert out["sequential"]["mean_without_car"]["tables"] == 1
    assert out["gap"]["regret"] == pytest.approx(100.25)
    assert out["gap_mean_without_car"]["regret"] == pytest.approx(0.5)
    doc = {"settings": {"tables": ["kc1", "car"]},
           "yardsticks": {"kc1": {"random_100_noisy_regret": 2.0},
                          "car": {"random_100_noisy_regret": 14.0}},
           "results": {"predictor": out}}
    text = flat.markdown(doc)
    assert "| mean ± se | without car | ms/eval |" in text
    assert "| 75.75 ± 25.00 | 1.50 ± 0.50 | 1 |" in text  # se: sqrt(0.5² + 50²) / 2; kc1 0.5
    assert "| 8.00 | 2.00 | |" in text  # random search: over both, and over kc1 alone
    assert "predictor +100.25 ± 0.00 (without car: +0.50 ± 0.00), 2 seeds" in text


@pytest.mark.unit
def test_the_default_is_paired_against_each_other_optimizer_seed_by_seed(bench):
    flat, _ = bench

    tables = ["kc1", "car"]
    runs = [_run("predictor", tb, s, c, 1.0) for tb in tables for s in (0, 1, 2) for c in (1, 8)]
    # hebo: sequential only, worse by 1 + seed on kc1 and by 10 on car; seed 2 lacks car
    runs += [_run("hebo", "kc1", s, 1, 2.0 + s) for s in (0, 1, 2)]
    runs += [_run("hebo", "car", s, 1, 11.0) for s in (0, 1)]
    runs.append({**_run("hebo", "car", 2, 1, 0.0), "error": "crashed"})  # a failed run: no pair
    # a twin: its sequential runs are tpe's, so only its 8-running row is paired
    runs += [_run("tpe", tb, s, 1, 3.0) for tb in tables for s in (0, 1)]
    runs += [_run("tpe:liar", tb, s, 8, 0.5) for tb in tables for s in (0, 1)]
    out = flat.against_base(runs, "predictor", tables, ["predictor", "hebo", "tpe", "tpe:liar"],
                            {"tpe:liar": "tpe"})
    assert "predictor" not in out and set(out["hebo"]) == {"sequential"}
    hebo = out["hebo"]["sequential"]
    assert hebo["kc1"]["regret"] == pytest.approx(-2.0) and hebo["kc1"]["seeds"] == 3
    assert hebo["kc1"]["stderr"] == pytest.approx(1 / 3 ** 0.5)
    assert hebo["car"] == {"regret": -10.0, "stderr": 0.0, "seeds": 2}
    # over both tables only seeds 0 and 1 pair: (-1 - 10) / 2 and (-2 - 10) / 2
    assert hebo["mean"]["seeds"] == 2 and hebo["mean"]["regret"] == pytest.approx(-5.75)
    assert hebo[flat.UNTIED_MEAN]["seeds"] == 3
    assert hebo[flat.UNTIED_MEAN]["regret"] == pytest.approx(-2.0)
    assert set(out["tpe"]) == {"sequential"}
    assert set(out["tpe:liar"]) == {"concurrent"}  # its sequential row would be tpe's again
    assert out["tpe:liar"]["concurrent"]["mean"]["regret"] == pytest.approx(0.5)


@pytest.mark.unit
def test_the_docs_table_shows_the_pairing_against_the_default(bench):
    flat, _ = bench
    pair = {"regret": -0.25, "stderr": 0.05, "seeds": 4}
    doc = {
        "settings": {"tables": ["kc1", "car"]},
        "yardsticks": {tb: {"random_100_noisy_regret": 2.0} for tb in ("kc1", "car")},
        "results": {},
        "paired": {"base": "predictor", "results": {"hebo": {"sequential": {
            "kc1": pair, "mean": {**pair, "regret": 1.5}}}}},
    }
    text = flat.markdown(doc)
    assert "predictor (the default) minus each, paired by seed" in text
    row = next(line for line in text.splitlines() if line.startswith("| hebo (seq)"))
    assert row == "| hebo (seq) | -0.25 ± 0.05 | - | +1.50 ± 0.05 (4) | - |"


@pytest.mark.unit
def test_each_peer_run_keeps_the_versions_it_ran_with(bench):
    flat, flat_peers = bench
    run = flat_peers.run_peer("optuna-tpe", "kc1", seed=0, budget=2)
    import optuna

    assert run["versions"]["optuna"] == optuna.__version__  # as installed, not as pinned
    assert set(run["versions"]) == set(flat_peers.PEERS["optuna-tpe"].packages)
    base = {"optimizer": "hebo", "error": None}
    runs = [{**base, "versions": {"hebo": "0.3.6", "scikit-learn": "1.9.1"}},
            {**base, "versions": {"scikit-learn": "1.9.1", "hebo": "0.3.6"}},  # the same set
            {**base, "versions": {"hebo": "0.3.6", "scikit-learn": "1.3.2"}},
            {**base},  # a run from before versions were kept
            {**base, "error": "crashed", "versions": {"hebo": "9"}},  # failed: not counted
            {"optimizer": "predictor", "error": None}]  # ours: in the JSON's machine record
    out = flat.peer_versions(runs)
    assert set(out) == {"hebo"} and out["hebo"]["not_recorded"] == 1
    assert sorted((r["versions"]["scikit-learn"], r["runs"]) for r in out["hebo"]["recorded"]) \
        == [("1.3.2", 1), ("1.9.1", 2)]


def test_the_json_pairs_against_auto_where_only_auto_ran(bench, tmp_path):
    flat, _ = bench

    def run(opt, seed, regret):
        return _run(opt, "kc1", seed, 1, regret)

    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps(run(o, s, r)) + "\n" for o, s, r in (
        ("auto", 0, 1.0), ("auto", 1, 2.0), ("tpe", 0, 1.5), ("tpe", 1, 3.0))))
    out = tmp_path / "flat.json"
    # every run is already there: nothing is submitted, the JSON is written from the file
    assert flat.main(["--strategies", "auto", "tpe", "--tables", "kc1", "--seeds", "2",
                      "--modes", "sequential", "--runs", str(runs), "--resume",
                      "--json", str(out)]) == 0
    paired = json.loads(out.read_text())["paired"]
    assert paired["base"] == "auto"
    assert paired["results"]["tpe"]["sequential"]["kc1"] == {
        "regret": -0.75, "stderr": 0.25, "seeds": 2}


@pytest.mark.unit
def test_independent_durations_keep_the_metric_and_ignore_the_configuration(bench):
    import flat_durations

    observe = flat_durations.independent_durations(_flat.observe)
    t = _flat.table("phoneme")
    mean_time = t.train_time_s.mean(axis=1)
    by_row = {r: k for k, r in t.rows.items()}
    quick, slow = by_row[mean_time.argmin()], by_row[mean_time.argmax()]
    times = set()
    for noise_seed in range(20):
        (v_quick, s_quick), (v_slow, s_slow) = (observe(k, "phoneme", noise_seed)
                                                for k in (quick, slow))
        assert v_quick == _flat.observe(quick, "phoneme", noise_seed)[0]  # the metric as before
        assert v_slow == _flat.observe(slow, "phoneme", noise_seed)[0]
        assert s_quick == s_slow and s_quick in t.train_time_s  # a time of the table, same for all
        times.add(s_quick)
    assert len(times) > 10  # drawn anew for each evaluation


@pytest.mark.unit
def test_the_durations_comparison_pairs_each_run_with_its_stored_seeds(bench):
    import flat_durations

    stored = [_run("predictor", "kc1", s, c, r) for s, c, r in (
        (0, 1, 1.0), (1, 1, 2.0), (0, 8, 1.5), (1, 8, 2.5), (2, 1, 5.0))]  # seed 2: one side
    stored.append({**_run("tpe", "kc1", 0, 8, 0.0)})  # another strategy: not paired
    variant = [_run("predictor", "kc1", s, 8, r) for s, r in ((0, 1.25), (1, 2.25))]
    out = flat_durations.compare(variant, stored, "predictor", ["kc1"])
    assert out["independent_minus_sequential"]["kc1"] == {"regret": 0.25, "stderr": 0.0,
                                                          "seeds": 2}
    assert out["stored_minus_sequential"]["mean"]["regret"] == 0.5
    assert out["independent_minus_stored"]["mean"]["regret"] == -0.25
