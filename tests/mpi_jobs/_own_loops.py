"""Own loops (``train(session)``) for tests/training/test_own_loop.py: each does one thing the
tests check, and writes what each rank saw under ``session.params["out"]``."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset


class Indexed(Dataset):
    """Sample i is (a feature vector, i % 3, i): the loop can record which samples it read."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, int]:
        g = torch.Generator().manual_seed(i)
        return torch.randn(4, generator=g), i % 3, i


def _write(session: Any, name: str, data: Any) -> None:
    out = Path(session.params["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.rank{session.rank}.json").write_text(json.dumps(data))


def _model(session: Any, algorithm: str = "sync") -> tuple[nn.Module, Any]:
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=session.params.get("lr", 0.1))
    return session.wrap(model, opt, algorithm=algorithm)


def _epoch(session: Any, model: nn.Module, opt: Any, loader: Any) -> tuple[float, list[int]]:
    seen: list[int] = []
    total = 0.0
    for x, y, index in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        total += float(loss)
        seen += index.tolist()
    return total, seen


def record(session: Any) -> None:
    """Trains, records each epoch's sample indices and steps on every rank, reports a loss."""
    model, opt = _model(session, session.params.get("algorithm", "sync"))
    loader = session.shard(Indexed(session.params["n"]), batch_size=session.params["batch"])
    epochs: list[dict[str, Any]] = []
    for epoch in range(1, session.epochs + 1):
        total, seen = _epoch(session, model, opt, loader)
        # the mean index over every rank's samples: exact, whatever the ranks' shares
        exact = session.reduce({"mean_index": (sum(seen), len(seen))})["mean_index"]
        epochs.append({"indices": seen, "steps": len(loader), "mean_index": exact})
        with opt.consensus():
            loss = session.mean({"loss": total / max(1, len(loader))})["loss"]
        if session.report(epoch, {"loss": loss, "acc": 1.0 / epoch}) != "continue":
            break
    _write(session, "record", epochs)


def decisions(session: Any) -> None:
    """Reports a rising value (each rank its own: rank 0's counts) and records every decision
    on every rank; returns when told."""
    seen = []
    for epoch in range(1, session.epochs + 1):
        decision = session.report(epoch, {"loss": float(epoch) + session.rank})
        seen.append(decision)
        if decision != "continue":
            break
    _write(session, "decisions", seen)


def rank1_returns_early(session: Any) -> None:
    """Rank 1 stops reporting after epoch 1 and returns; rank 0 goes on to epoch 2."""
    for epoch in range(1, 4):
        if session.rank == 1 and epoch == 2:
            _write(session, "skipped", {"time": time.time()})
            return
        session.report(epoch, {"loss": 1.0})


def rank1_skips_a_report(session: Any) -> None:
    """Rank 1 skips epoch 2's report and trains on (a sync step: it waits in the allreduce
    for rank 0, which waits in report for rank 1)."""
    model, opt = _model(session)
    loader = session.shard(Indexed(32), batch_size=8)
    for epoch in range(1, 5):
        _epoch(session, model, opt, loader)
        if session.rank == 1 and epoch == 2:
            _write(session, "skipped", {"time": time.time()})
            continue
        session.report(epoch, {"loss": 1.0})


def rank1_dies(session: Any) -> None:
    """Rank 1 is killed (SIGKILL) inside the loop at epoch 2."""
    model, opt = _model(session)
    loader = session.shard(Indexed(32), batch_size=8)
    for epoch in range(1, 5):
        if session.rank == 1 and epoch == 2:
            _write(session, "skipped", {"time": time.time()})
            os.kill(os.getpid(), signal.SIGKILL)
        _epoch(session, model, opt, loader)
        session.report(epoch, {"loss": 1.0})


def checkpointed(session: Any) -> None:
    """Saves after epoch 2 (rank-specific state) and returns; when resumed, records what it
    got back and reports epochs 3 and 4."""
    state = session.load_checkpoint()
    if state is None:
        model, opt = _model(session)
        for epoch in (1, 2):
            session.report(epoch, {"loss": 10.0 - epoch})
        with torch.no_grad():
            model.weight.add_(1.5)
        session.save_checkpoint({"model": model.state_dict(), "opt": opt.state_dict(),
                                 "rank": session.rank, "tag": f"saved-by-{session.rank}",
                                 "epoch": 2})
        _write(session, "saved", {"weight": model.weight.tolist()})
        return
    model, opt = _model(session)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    _write(session, "loaded", {"rank": state["rank"], "tag": state["tag"],
                               "epoch": state["epoch"], "weight": model.weight.tolist()})
    for epoch in range(state["epoch"] + 1, 5):
        session.report(epoch, {"loss": 10.0 - epoch})


def no_metric(session: Any) -> None:
    session.report(1, {"not_the_metric": 1.0})


class Blobs(Dataset):
    """Sample i: class i % 3, a point near that class's centre in 8 dimensions (learnable)."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(7)
        self.centres = 2.0 * torch.randn(3, 8, generator=g)
        self.x = torch.randn(n, 8, generator=g)
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.centres[i % 3] + self.x[i], i % 3


def pruned(session: Any) -> None:
    """An MLP pruned by ``session.prune_units`` at each epoch's start ([training] prune in the
    trial's config); records per epoch the widths, which rows of the first layer were kept,
    whether its momentum was sliced with them (not reset) and how far its weights moved in the
    epoch after; ``params["save_at"]``: save a checkpoint after that epoch and return."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                          nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = Blobs(192)
    model, opt = session.wrap(model, opt, algorithm=session.params.get("algorithm", "sync"),
                              example=data.x[:2])  # the graph pruning traces
    state, start = session.load_checkpoint(), 1
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["epoch"] + 1
    loader = session.shard(data, batch_size=32)
    rows: list[dict[str, Any]] = []
    for epoch in range(start, session.epochs + 1):
        before = model[0].weight.detach().clone()
        momentum = opt.state.get(model[0].weight, {}).get("momentum_buffer")
        changed = session.prune_units(epoch)
        after = model[0].weight.detach().clone()
        kept = [i for i in range(len(before)) if any(torch.equal(before[i], r) for r in after)]
        sliced = opt.state.get(model[0].weight, {}).get("momentum_buffer")
        same = None if momentum is None or sliced is None else bool(  # before the steps
            torch.equal(sliced, momentum[kept]) and sliced.abs().sum() > 0)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        with torch.no_grad():
            correct = int((model(data.centres[torch.arange(192) % 3] + data.x).argmax(1)
                           == torch.arange(192) % 3).sum())
        acc = session.reduce({"acc": (correct, 192)})["acc"]
        rows.append({
            "epoch": epoch, "changed": changed, "kept": kept, "acc": acc,
            "widths": [m.out_features for m in model if isinstance(m, nn.Linear)],
            "momentum_sliced": same,
            "moved": float((model[0].weight.detach() - after).abs().max()),
            "weights": [float(p.detach().double().sum()) for p in model.parameters()],
        })
        session.report(epoch, {"loss": 1.0 - acc, "acc": acc})
        if epoch == session.params.get("save_at"):
            session.save_checkpoint({"model": model.state_dict(), "opt": opt.state_dict(),
                                     "epoch": epoch})
            break
    _write(session, "pruned" if state is None else "pruned-resumed", rows)
