"""`search dashboard`: the real console script serves optuna-dashboard on 127.0.0.1 over the
study's journal file; the test reads the study back through the dashboard's HTTP API."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import urllib.request
from pathlib import Path

import optuna
import pytest

from search.analysis._figures import importance_figure
from tests.cli_helpers import run_cli, search_command
from tests.search.test_report import MULTI, NB201, shared_storage
from training.contract import open_storage

pytestmark = pytest.mark.timeout(120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - 127.0.0.1 only
        return response.status, response.read()


def _first_line(proc: subprocess.Popen[str], seconds: float) -> str:
    """The first line the process prints, waiting at most ``seconds``."""
    assert proc.stdout is not None and proc.stderr is not None
    lines: list[str] = []
    stdout = proc.stdout
    reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(seconds)
    if not lines or not lines[0]:
        proc.kill()
        pytest.fail(f"no URL printed within {seconds} s; stderr: {proc.stderr.read()[-2000:]}")
    return lines[0]


def test_dashboard_serves_the_journal_storage(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    journal = shared_storage(tmp_path_factory)
    study = optuna.load_study(study_name=NB201[2], storage=open_storage(journal))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    proc = subprocess.Popen([*search_command(), "dashboard", NB201[2], "--storage", journal,
                             "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = _first_line(proc, 90)
        page = f"http://127.0.0.1:{port}/dashboard/studies/{study._study_id}"
        assert line.strip() == f"optuna-dashboard for {journal} at {page}"

        status, body = _get(f"http://127.0.0.1:{port}/api/studies")
        assert status == 200
        listed = {s["study_name"]: s for s in json.loads(body)["study_summaries"]}
        assert set(NB201) <= set(listed)
        assert listed[NB201[2]]["directions"] == ["maximize"]

        status, body = _get(f"http://127.0.0.1:{port}/api/studies/{study._study_id}?after=0")
        detail = json.loads(body)
        assert [t["number"] for t in detail["trials"]] == [t.number for t in study.trials]
        assert detail["objective_names"] == ["val_accuracy"]
        assert {a["key"] for a in detail["trials"][0]["user_attrs"]} >= {
            "genome_summary", "wall_time_s", "ranks", "history"}
        states = {t["state"] for t in detail["trials"]}
        assert {"Complete", "Pruned"} <= states, states

        status, body = _get(page)  # the single-page app itself
        assert status == 200 and b"<html" in body.lower()

        # The report's parameter importances are the dashboard's, objective by objective.
        for name in (NB201[2], MULTI):
            shown = optuna.load_study(study_name=name, storage=open_storage(journal))
            status, body = _get(f"http://127.0.0.1:{port}/api/studies/{shown._study_id}"
                                "/param_importances")
            assert status == 200
            served = [{p["name"]: p["importance"] for p in objective}
                      for objective in json.loads(body)["param_importances"]]
            figure = importance_figure(shown)
            assert "PED-ANOVA" in figure.layout.title.text
            drawn = [dict(zip(bar.y, bar.x, strict=True)) for bar in figure.data]
            assert len(drawn) == len(served) == len(shown.directions)
            for ours, theirs in zip(drawn, served, strict=True):
                assert ours == pytest.approx(theirs, abs=1e-9), name
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            code = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 0, proc.stderr.read() if proc.stderr else ""
    with pytest.raises(OSError):  # the port is free again: nothing left listening
        socket.create_connection(("127.0.0.1", port), timeout=2).close()




def test_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    journal = str(tmp_path / "x.journal")
    optuna.create_study(study_name="x", storage=open_storage(journal))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out, err = run_cli("dashboard", journal, "--port", str(port))
    assert code == 2
    assert re.fullmatch(rf"error: port: cannot listen on 127\.0\.0\.1:{port}: .+ \(pass another "
                        r"--port, or 0 for any free one\)\n", err), err


@pytest.mark.unit
@pytest.mark.parametrize(("args", "message"), [
    (["nope", "--storage", "{journal}"], "error: study: no study 'nope' in {journal}"),
    (["{tmp}/none.journal"], "error: storage: no journal file '{tmp}/none.journal'"),
    ([], "error: storage: no detol.journal here: name a study, a study file or a storage"),
    (["x"], "error: storage: no journal file 'detol.journal' (pass --storage or set DETOL_STORAGE)"),
    (["--storage", "{tmp}/none.journal"], "error: storage: no journal file '{tmp}/none.journal'"),
    (["bogus://x"], "error: storage: unsupported storage URL scheme 'bogus'"),
    (["{journal}", "--storage", "{journal}"], "error: storage: give the storage once"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          args: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    journal = str(tmp_path / "x.journal")
    optuna.create_study(study_name="x", storage=open_storage(journal))
    argv = [a.format(tmp=tmp_path, journal=journal) for a in args]
    code, out, err = run_cli("dashboard", *argv, "--port", "0")
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(message.format(tmp=tmp_path, journal=journal)), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.journal"]
