"""A single-node job's plain ``mpiexec -n N`` runs under the mpich wheel's gforker, which opens
no port (Hydra's control port listens on 0.0.0.0 whatever it is told); anything else runs as
written (issue 27)."""

from __future__ import annotations

import os
import sys

import pytest

from training.contract import SINGLE_NODE_ENV
from training.launch import launcher_argv

HERE = os.path.dirname(sys.executable)
pytestmark = [pytest.mark.skipif(
    not os.path.exists(os.path.join(HERE, "mpiexec.gforker")), reason="the mpich wheel's gforker"
), pytest.mark.unit]


def test_a_single_node_plain_line_runs_under_gforker() -> None:
    argv = launcher_argv("mpiexec -n {ranks}", 3, SINGLE_NODE_ENV)
    assert argv == [os.path.join(HERE, "mpiexec.gforker"), "-n", "3"]


@pytest.mark.parametrize("line", ["mpiexec -n {ranks} -bind-to core", "mpiexec.hydra -np"])
def test_hydra_options_or_odd_lines_run_as_written(line: str) -> None:
    argv = launcher_argv(line, 2, SINGLE_NODE_ENV)
    assert os.path.basename(argv[0]) == line.split()[0]


def test_a_job_on_several_nodes_keeps_hydra() -> None:
    argv = launcher_argv("mpiexec -n {ranks}", 2, {})
    assert argv == [os.path.join(HERE, "mpiexec"), "-n", "2"]
