"""The best trial's final weights, written where a user asks (``search best --export-weights``).

Trials keep their weights with ``[training] keep_weights = true``: rank 0 writes the state dict
to ``detol-weights/STUDY/trial-N.pt`` and the driver records the path (``weights_path``). The
export is one torch file, loaded without detol::

    saved = torch.load("best.pt", weights_only=False)
    model = build(saved["params"], data)    # the model plug-in, with the params the trial's got
    model.load_state_dict(saved["state_dict"])

``params`` is what the trial's ``build(params, data)`` received (training fields, genome, your
own); ``searched`` the study's parameters as Optuna holds them; ``config`` the whole training
configuration.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import optuna

from search._errors import StudyError


def export_best_weights(study: optuna.Study, path: Path) -> str:
    """Writes the best trial's weights to ``path`` (whole or not at all); the line to print.
    Several objectives: the first trial of the Pareto front (``search best`` lists them)."""
    import torch

    best = study.best_trials[0] if len(study.directions) > 1 else study.best_trial
    kept = best.user_attrs.get("weights_path")
    if not kept:
        config = study.user_attrs.get("detol:study", {})
        why = ("its study does not keep weights: set [training] keep_weights = true"
               if not config.get("training", {}).get("keep_weights") else
               "no weights were recorded for it")
        raise StudyError("export-weights", f"trial {best.number} is the best, but {why}")
    try:
        state = torch.load(kept, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError) as exc:
        raise StudyError("export-weights", f"trial {best.number}'s weights at {kept} cannot be "
                         f"read: {exc}") from None
    try:  # what the trial's build(params, data) got, written by the driver at its start
        given = json.loads(Path(kept).with_suffix(".json").read_text())
    except (OSError, ValueError) as exc:
        raise StudyError("export-weights", f"trial {best.number}'s parameters beside its "
                         f"weights cannot be read: {exc}") from None
    saved = {"state_dict": state, "params": given["params"], "config": given["config"],
             "values": list(best.values), "trial": best.number, "study": study.study_name,
             "searched": dict(best.params)}
    target = Path(path)
    if target.is_dir():
        raise StudyError("export-weights", f"{target} is a directory: give a file path")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, part = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    try:
        torch.save(saved, part)
        os.replace(part, target)  # nothing half-written under the asked name
    except BaseException:
        Path(part).unlink(missing_ok=True)
        raise
    return (f"wrote trial {best.number}'s weights ({len(state)} tensors) and parameters to "
            f"{target}")
