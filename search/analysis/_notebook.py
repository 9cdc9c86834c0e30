"""What the notebooks in ``notebooks/`` need besides the figures: find the storage and studies
(the README's quickstart leaves ``detol.journal`` in the repository root, and Jupyter runs a
notebook in ``notebooks/``) without ever creating a storage, and give every plotly figure a
static PNG beside its interactive version, so that a saved notebook shows its figures where no
JavaScript runs (GitHub, nbviewer).

A missing storage or study is a :class:`~search.StudyError` whose one line says what to set.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import optuna

from search._errors import StudyError, words
from training.contract import DEFAULT_STORAGE, journal_path, open_storage, redact

_SET_STORAGE = "set STORAGE (or DETOL_STORAGE) to the journal file or storage URL of your study"


def _local_file(url: str) -> str | None:
    """The file a journal or SQLite URL names (it must exist before we open it), else None."""
    path = journal_path(url)
    if path is None and url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
    return path


def find_storage(storage: str | None = None, *, here: Path | None = None) -> str:
    """``storage`` if given (a journal or SQLite file must exist), else ``detol.journal`` in
    ``here`` (the current directory) or the directory above it: a notebook runs in
    ``notebooks/`` and the quickstart writes the repository root's ``detol.journal``.

    Raises :class:`~search.StudyError` (``storage``) when there is none; creates nothing.
    """
    if storage:
        path = _local_file(storage)
        if path is not None and not Path(path).is_file():
            raise StudyError("storage", f"no file {path!r} (in {Path.cwd()}); {_SET_STORAGE}")
        return storage
    here = (here or Path.cwd()).resolve()
    for folder in (here, here.parent):
        if (folder / DEFAULT_STORAGE).is_file():
            return str(folder / DEFAULT_STORAGE)
    raise StudyError("storage", f"no {DEFAULT_STORAGE} in {here} or {here.parent}: run `search "
                     "run studies/quickstart.toml` in the repository root first, or "
                     f"{_SET_STORAGE}")


def load_studies(names: Sequence[str] | str | None, storage: str | None = None,
                 ) -> list[optuna.Study]:
    """The studies ``names`` (a list or comma-separated; empty or None: every study) in the
    storage :func:`find_storage` finds. Raises :class:`~search.StudyError` naming the studies
    that are there when one is not."""
    url = find_storage(storage)
    try:
        backend = open_storage(url)
    except ValueError as exc:
        raise StudyError("storage", f"{redact(url)}: {exc}") from None
    known = optuna.get_all_study_names(backend)
    wanted = [n for n in (names.split(",") if isinstance(names, str) else names or []) if n]
    missing = [n for n in wanted if n not in known]
    if missing or not known:
        what = f"no study {missing[0]!r}" if missing else "no study at all"
        raise StudyError("study", f"{what} in {redact(url)} (found: {words(known) or 'none'}); "
                         "set STUDY (or DETOL_STUDY) to one of them")
    return [optuna.load_study(study_name=n, storage=backend) for n in wanted or known]


def load_study(name: str, storage: str | None = None) -> optuna.Study:
    """The study ``name`` in the storage :func:`find_storage` finds (see :func:`load_studies`)."""
    return load_studies([name], storage)[0]


def static_images(width: int = 960) -> bool:
    """Show each plotly figure interactively and as a PNG (renderer ``plotly_mimetype+png``).

    The PNG is made by kaleido in a headless Chrome/Chromium (Debian's ``chromium`` works; no
    download). Without them, print one line saying so and leave figures interactive only.
    Returns whether static images are on.
    """
    import plotly.graph_objects as go
    import plotly.io as pio

    try:
        import kaleido

        # A first image on its own, which raises when there is no browser (a server whose
        # browser failed to start would make every later image wait forever).
        pio.to_image(go.Figure(), format="png", width=20, height=20)
        kaleido.start_sync_server(silence_warnings=True)  # then one browser for all figures
    except Exception as exc:  # noqa: BLE001 - any failure means: no static images here
        reason = next((line.strip() for line in str(exc).splitlines() if line.strip()),
                      type(exc).__name__)
        print(f"figures are interactive only, with no static image for GitHub or nbviewer "
              f"({reason[:200]}); for images: pip install kaleido, and install Chrome or "
              "Chromium (Debian: apt-get install chromium)")
        return False
    # plotly passes its default kaleido options, which a running server ignores (and says so).
    warnings.filterwarnings("ignore", message="The kopts argument is ignored")
    pio.renderers["png"].width = width
    pio.renderers.default = "plotly_mimetype+png"
    return True
