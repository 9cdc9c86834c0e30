"""What a trial's MPI job runs on its ranks: the programs ``mpiexec`` starts
(``python -m training.jobs.worker SPEC.json`` for one trial, ``python -m
training.jobs.warm_worker`` for a warm pool), the built-in trainer and a user's own loop, and
the in-place regrouping of a warm pool's ranks. Add a rank-side program here.
"""

from training._lazy import lazy

# The programs (worker, warm_worker) are not imported here: ``python -m`` runs them.
__getattr__ = lazy(__name__, {
    "TrainResult": "_trainer",
    "Trainer": "_trainer",
    "run_own_loop": "_own_loop",
    "Shelf": "_regroup",
    "regroup": "_regroup",
})

__all__ = ["Shelf", "TrainResult", "Trainer", "regroup", "run_own_loop"]
