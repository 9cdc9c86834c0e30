"""MPI program for tests: ASGD's exchange, end to end, on 2 ranks, with states chosen by hand.

Rank 1 sends a state it chose (through ``after_step``, the real send path); rank 0 then takes one
optimizer step with a gradient it chose, through the real hooks (``before_step`` reads the
window, the optimizer steps, ``after_step`` gates and blends). Rank 0 writes what its weights
became, so the test can hold them to the paper's formula.

Usage: mpiexec -n 2 python tests/mpi_jobs/_asgd_wiring.py OUT.json
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
from mpi4py import MPI

from training.algorithms._asgd import asgd_update, parzen_gate
from training.algorithms._base import flat_parameters, set_flat_parameters
from training.algorithms._registry import make_algorithm

EPS = 0.1
W_I = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
G = np.array([0.5, 1.0, -1.0, 0.25], np.float32)
G2 = np.array([-0.25, 0.5, 0.5, 1.0], np.float32)


def one_case(comm: MPI.Comm, w_j: np.ndarray, momentum: float) -> dict:
    model = torch.nn.Linear(4, 1, bias=False)
    algo = make_algorithm("asgd", model, comm, lr=EPS, send_every=1, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=EPS, momentum=momentum)
    out: dict = {}
    if comm.rank == 1:
        set_flat_parameters(model, w_j)
        algo.after_step()  # sends w_j into rank 0's window
        algo.win.Flush(0)  # type: ignore[attr-defined]
    comm.Barrier()  # rank 0 reads only after the message is complete
    if comm.rank == 0:
        set_flat_parameters(model, W_I)
        for grad in (G, G2):  # the second step finds no new message
            algo.zero_grad()
            model.weight.grad = torch.from_numpy(grad.copy()).view_as(model.weight)
            assert algo.before_step(True)
            opt.step()
            algo.after_step()
            out.setdefault("weights", []).append(flat_parameters(model, np.float64).tolist())
        out["counters"] = algo.counters()
        # The in-place blend against the reference formula, for several states at once.
        rng = np.random.default_rng(0)
        checks = []
        for _ in range(50):
            w_old, w_ext1, w_ext2 = (rng.normal(size=4).astype(np.float32) for _ in range(3))
            w_new = (w_old - EPS * rng.normal(size=4)).astype(np.float32)
            exts = [w_ext1, w_ext2]
            accepted = [w for w in exts if parzen_gate(w_old, w_new, w)]
            expected = asgd_update(w_old, w_new, accepted, EPS)
            algo._candidates = [e.copy() for e in exts]  # type: ignore[attr-defined]
            algo._w_old[:] = w_old  # type: ignore[attr-defined]
            w = w_new.copy()
            n = algo._blend(w)  # type: ignore[attr-defined]
            checks.append({"accepted": n, "expected_accepted": len(accepted),
                           "error": float(np.abs(w - expected).max())})
        algo._candidates = []  # type: ignore[attr-defined]
        out["blend_checks"] = checks
    algo.finish()
    return out


def main(path: str) -> None:
    comm = MPI.COMM_WORLD
    towards = W_I - 10 * EPS * G  # where rank 0's own step goes: accepted
    away = W_I + 10 * EPS * G  # against it: rejected
    result = {
        "towards": one_case(comm, towards, 0.0),
        "away": one_case(comm, away, 0.0),
        "towards_momentum": one_case(comm, towards, 0.9),
    }
    if comm.rank == 0:
        result.update(eps=EPS, w_i=W_I.tolist(), g=G.tolist(), g2=G2.tolist(),
                      towards=dict(result["towards"], w_j=towards.tolist()),
                      away=dict(result["away"], w_j=away.tolist()))
        result["towards_momentum"]["w_j"] = towards.tolist()
        with open(path, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
