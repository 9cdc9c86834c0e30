"""A training loop of your own on detol's MPI core: scikit-learn's digits, a small MLP, plain
torch. Searched by ``studies/own-loop.toml`` (run from the repository root)::

    search run studies/own-loop.toml

The lines marked ``# detol`` are the only ones that know about detol (docs/own-loop.md).
"""

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset


def digits(val_fraction: float = 0.2) -> tuple[TensorDataset, TensorDataset]:
    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    val, fit = order[: int(len(x) * val_fraction)], order[int(len(x) * val_fraction) :]
    return TensorDataset(x[fit], y[fit]), TensorDataset(x[val], y[val])


def train(session) -> None:  # noqa: ANN001  # detol: a training.Session
    p, device = session.params, session.device  # detol
    train_set, val_set = digits()
    model = nn.Sequential(nn.Linear(64, p["hidden"]), nn.ReLU(), nn.Linear(p["hidden"], 10))
    opt = torch.optim.SGD(model.parameters(), lr=p["lr"], momentum=0.9)
    model, opt = session.wrap(model.to(device), opt, algorithm="sync")  # detol
    state, start = session.load_checkpoint(), 1  # detol
    if state is not None:  # detol: a paused trial, promoted, goes on where it stopped
        model.load_state_dict(state["model"])  # detol
        opt.load_state_dict(state["opt"])  # detol
        start = state["epoch"] + 1  # detol
    loader = session.shard(train_set, batch_size=64)  # detol
    val_loader = session.shard(val_set, batch_size=256, shuffle=False)  # detol
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(start, session.epochs + 1):  # detol
        model.train()
        for x, y in loader:
            opt.zero_grad()
            loss_fn(model(x.to(device)), y.to(device)).backward()
            opt.step()
        model.eval()
        correct = seen = 0
        with torch.no_grad():
            for x, y in val_loader:
                correct += int((model(x.to(device)).argmax(1) == y.to(device)).sum())
                seen += len(y)
        metrics = session.reduce({"val_accuracy": (correct, seen)})  # detol: exact over ranks
        decision = session.report(epoch, metrics)  # detol
        if session.checkpoint_due():  # detol: paused (promoted later, it goes on from here)
            session.save_checkpoint({"model": model.state_dict(), "opt": opt.state_dict(),  # detol
                                     "epoch": epoch})  # detol
        if decision != "continue":  # detol
            return  # detol
