"""User code that trial MPI jobs import in tests (put on PYTHONPATH through [launcher] env)."""

from __future__ import annotations

from training import Dataset, load_dataset


def _claim(path: str) -> bool:
    """True for exactly one caller per path, however many jobs race for it (O_EXCL)."""
    import os

    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def digits_failing_on_two_ranks(val_fraction: float) -> Dataset:
    """Digits, except that rank 1 of a 2-rank job raises: a user error on a non-root rank."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.size == 2 and comm.rank == 1:
        raise RuntimeError("user dataset exploded on rank 1")
    return load_dataset("digits", val_fraction)


def digits_rank1_dies(val_fraction: float) -> Dataset:
    """Rank 1 exits hard (as if killed) before training; rank 0 would wait in a collective."""
    import os

    from mpi4py import MPI

    if MPI.COMM_WORLD.rank == 1:
        os._exit(9)
    return load_dataset("digits", val_fraction)


def digits_rank1_dies_unseen(val_fraction: float) -> Dataset:
    """Rank 1 exits hard, but a child of it keeps its PMI socket open (and nothing else): what
    Hydra sees when it misses a rank's exit, so only the ranks' own watch can end the job. The
    child leaves when the launcher closes the socket's other end."""
    import os
    import select

    from mpi4py import MPI

    if MPI.COMM_WORLD.rank == 1:
        pmi = int(os.environ["PMI_FD"])
        if os.fork() == 0:
            os.closerange(0, pmi)
            os.closerange(pmi + 1, 4096)
            select.select([pmi], [], [], 300)
            os._exit(0)
        os._exit(9)
    return load_dataset("digits", val_fraction)


def digits_failing_on_three_ranks(val_fraction: float) -> Dataset:
    """Digits, but a 3-rank job raises on rank 1: lets a study mix good and failing trials."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.size == 3 and comm.rank == 1:
        raise RuntimeError("user dataset exploded on rank 1 of 3")
    return load_dataset("digits", val_fraction)


def digits_rank1_dies_once(val_fraction: float) -> Dataset:
    """Rank 1 of the first job to get here dies hard once both ranks are in; later jobs train.

    The job's [launcher] env names a directory (DETOL_FAULT_DIR) that remembers the first job.
    Rank 1 dies at once rather than on a timer: a timer lost the race to a fast machine, where
    three epochs of digits end before it fires and the job completes.
    """
    import os

    from mpi4py import MPI

    marker = os.path.join(os.environ["DETOL_FAULT_DIR"], "rank-died")
    comm = MPI.COMM_WORLD
    first = comm.bcast(_claim(marker) if comm.rank == 0 else None)
    comm.Barrier()
    if first and comm.rank == 1:
        os._exit(9)  # rank 0 goes on and waits for it in the first collective
    return load_dataset("digits", val_fraction)


def digits_slow_once(val_fraction: float) -> Dataset:
    """The first job to get here (per DETOL_FAULT_DIR) marks it and sleeps 120 s before loading
    digits, so a test can kill its worker mid-trial; later jobs load at once."""
    import os
    import time

    from mpi4py import MPI

    marker = os.path.join(os.environ["DETOL_FAULT_DIR"], "slow-job")
    comm = MPI.COMM_WORLD
    first = comm.bcast(_claim(marker) if comm.rank == 0 else None)
    if first:
        time.sleep(120)
    return load_dataset("digits", val_fraction)


def digits_marks_loaded(val_fraction: float) -> Dataset:
    """Digits; each rank first writes ``loaded.rankN`` in DETOL_FAULT_DIR (MPI is up, training
    follows), so a test can strike a job that trains."""
    import os

    from mpi4py import MPI

    directory = os.environ["DETOL_FAULT_DIR"]
    with open(os.path.join(directory, f"loaded.rank{MPI.COMM_WORLD.rank}"), "w") as f:
        f.write(str(os.getpid()))
    return load_dataset("digits", val_fraction)
