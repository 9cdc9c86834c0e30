#!/usr/bin/env bash
# The GPU check: what only a machine with a CUDA GPU exercises, in one short run.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]        (default: /tmp/detol-gpu-check)
#
# Needs a Python with a CUDA build of torch and detol's dependencies; where they are missing and
# a folder .whl/ of wheels sits in the repository root (pip download ... -d .whl), they are
# installed from it first, offline, into a venv at /tmp/detol-venv that also sees the machine's
# own packages. Each step has its own time limit, so one
# that hangs does not take the others with it:
#   1. the cuda-marked tests (ASGD's device buffer and host copy, device choice and its name);
#   2. the training core's real MPI tests, which on a GPU machine train on CUDA (sync SGD
#      equal to one process on the global batch, every algorithm, own loops, checkpoints,
#      pruning across ranks, the warm pool) and the end-to-end study (each trial records its
#      device);
#   3. the quickstart study through `search run`, and the device its trials recorded;
#   4. ASGD's mutants that survived the CPU-only tests, against the cuda tests
#      (benchmarks/mutation.py, phase full_after_gpu).
# STEPS, CORE_TESTS and JOBS (pytest-xdist workers) choose a part.
# It writes OUT_DIR/gpu_check.json (the steps' exit codes and pytest summaries, the GPU, the
# versions, the quickstart's trials) and the logs beside it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-/tmp/detol-gpu-check}
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
if [ -d .whl ] && ! "$PY" -c "import optuna, dask, mpi4py" 2>/dev/null; then
  # a venv that sees the machine's packages (torch) and gets ours, as a normal install lays
  # them out: mpiexec beside its python, libmpi under its prefix (where mpi4py looks)
  base=$("$PY" -c "import site; print(site.getsitepackages()[0])")
  "$PY" -m venv --without-pip /tmp/detol-venv || exit 1
  echo "$base" > "$(echo /tmp/detol-venv/lib/python3*/site-packages)/machine.pth"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --prefix /tmp/detol-venv .whl/*.whl || exit 1
  PY=/tmp/detol-venv/bin/python
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
# torch.cuda.is_available() through NVML, without a CUDA context: the mutation tool forks a
# child per mutant, and CUDA cannot start again in a child forked after the parent started it
export PYTORCH_NVML_BASED_CUDA_CHECK=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
  > "$OUT_DIR/gpu.txt" 2>&1

STEPS=${STEPS:-cuda_tests core_tests quickstart mutation}  # a subset: STEPS="cuda_tests"
step() {  # step NAME SECONDS COMMAND...: the command's exit code goes to NAME.rc
  local name=$1 limit=$2; shift 2
  case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
  echo "== $name ($(date +%T))"
  timeout -k 10 "$limit" "$@" > "$OUT_DIR/$name.log" 2>&1
  echo $? > "$OUT_DIR/$name.rc"
  tail -n 3 "$OUT_DIR/$name.log"
}

step cuda_tests 120 "$PY" -m pytest -p no:cacheprovider -q -m cuda tests/training/test_cuda.py
XDIST=$("$PY" -c "import xdist" 2>/dev/null && echo "-n ${JOBS:-4}")  # where pytest-xdist is
CORE_TESTS=${CORE_TESTS:-tests/training/test_sync_equivalence.py tests/training/test_algorithms.py \
  tests/training/test_own_loop.py tests/training/test_one_core.py \
  tests/training/test_checkpoints.py tests/training/test_reshard.py \
  tests/training/test_pruning_ranks.py tests/training/test_pool.py tests/search/test_end_to_end.py}
# shellcheck disable=SC2086  # word splitting wanted: a list of files
step core_tests 300 "$PY" -m pytest -p no:cacheprovider -q $XDIST -m "not slow and not benchmark" \
  $CORE_TESTS
QS=$(mktemp -d)
cp studies/quickstart.toml "$QS/"
step quickstart 120 bash -c "cd '$QS' && '$PY' -m search.cli run quickstart.toml --no-progress"
cp benchmarks/results/mutation.json "$OUT_DIR/mutation.json"
step mutation 120 "$PY" benchmarks/mutation.py training/algorithms/_asgd.py --survivors-of full_after \
  --phase full_after_gpu --json "$OUT_DIR/mutation.json" \
  --tests tests/training/test_cuda.py tests/training/test_asgd_inprocess.py \
  tests/training/test_asgd_unit.py tests/training/test_asgd_rules.py

"$PY" - "$OUT_DIR" "$QS" <<'EOF'
import datetime, json, pathlib, platform, re, sys

import torch

out, qs = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
steps = {}
for rc in sorted(out.glob("*.rc")):
    log = (out / f"{rc.stem}.log").read_text(errors="replace").splitlines()
    summary = [line for line in log if re.search(r"\b(passed|failed|error)", line)]
    steps[rc.stem] = {"exit": int(rc.read_text()), "summary": summary[-1:] or log[-1:]}
trials = []
try:
    import optuna
    from training.contract import open_storage

    study = optuna.load_study(study_name="quickstart",
                              storage=open_storage(str(qs / "detol.journal")))
    trials = [{"number": t.number, "state": t.state.name, "value": t.value,
               "device": t.user_attrs.get("device"), "ranks": t.user_attrs.get("ranks"),
               "train_time_s": t.user_attrs.get("train_time_s")} for t in study.trials]
except Exception as exc:  # the summary still says what ran
    trials = [{"error": f"{type(exc).__name__}: {exc}"}]
mutation = json.loads((out / "mutation.json").read_text())["modules"]["training/algorithms/_asgd.py"] \
    if (out / "mutation.json").exists() else {}
report = {
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "gpu": (out / "gpu.txt").read_text().strip(),
    "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
    "steps": steps, "quickstart_trials": trials,
    "asgd_mutants_gpu": {k: v for k, v in mutation.get("full_after_gpu", {}).items()
                         if k not in ("outcomes",)},
}
(out / "gpu_check.json").write_text(json.dumps(report, indent=1))
print(json.dumps({k: report[k] for k in ("gpu", "torch", "steps")}, indent=1))
EOF
