"""Where trials run: a Dask client on a LocalCluster (default) or on an existing scheduler.

Every Dask worker offers ``MPI`` slots as a worker resource; a trial asks for ``ranks`` of them,
so a worker never starts more MPI ranks than it was given. A trial whose rank count no worker can
hold would wait forever, so that is checked before the first trial is asked for.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from distributed import Client, LocalCluster

from search._errors import StudyError
from training.launch import LauncherNotFound, launcher_argv

MPI = "MPI"  # the Dask worker resource that counts MPI slots


def local_cluster_shape(
    *,
    concurrency: int,
    max_ranks: int,
    workers: int | None = None,
    slots_per_worker: int | None = None,
) -> tuple[int, int]:
    """(workers, MPI slots per worker) for a LocalCluster on this machine.

    One worker per concurrent trial; the machine's cores are shared out, and every worker gets at
    least the largest rank count in the study (oversubscribing small machines, as MPI allows).
    """
    n = workers or concurrency
    cores = os.cpu_count() or 1
    slots = slots_per_worker or max(max_ranks, cores // n)
    return n, slots


@contextlib.contextmanager
def open_client(
    *,
    address: str | None,
    concurrency: int,
    max_ranks: int,
    launcher: str,
    workers: int | None = None,
    slots_per_worker: int | None = None,
    connect_timeout: float = 10.0,
) -> Iterator[Client]:
    """A connected client whose workers can run this study's trials, or StudyError."""
    if address is None:
        try:
            launcher_argv(launcher, max_ranks)
        except LauncherNotFound as exc:
            raise StudyError("launcher.command", str(exc)) from None
        n, slots = local_cluster_shape(
            concurrency=concurrency,
            max_ranks=max_ranks,
            workers=workers,
            slots_per_worker=slots_per_worker,
        )
        if slots < max_ranks:
            raise StudyError(
                "cluster.slots_per_worker",
                f"{slots} MPI slots cannot hold a trial with {max_ranks} ranks",
            )
        with (
            LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                resources={MPI: slots},
                host="127.0.0.1",
                dashboard_address=None,
                silence_logs=logging.ERROR,
            ) as cluster,
            Client(cluster) as client,
        ):
            yield client
        return
    try:
        client = Client(address, timeout=f"{connect_timeout}s")
    except (OSError, TimeoutError) as exc:
        raise StudyError(
            "cluster.address",
            f"no Dask scheduler answered at {address} within {connect_timeout:g} s ({exc})",
        ) from None
    with client:
        _check_remote_workers(client, max_ranks, launcher)
        yield client


def _check_remote_workers(client: Client, max_ranks: int, launcher: str) -> None:
    workers = client.scheduler_info(n_workers=-1)["workers"]
    slots = [w.get("resources", {}).get(MPI, 0) for w in workers.values()]
    if workers and max(slots) < max_ranks:
        raise StudyError(
            "cluster.address",
            f"no worker offers {max_ranks} '{MPI}' slots (largest: {max(slots):g}); start workers "
            f"with '--resources {MPI}={max_ranks}'",
        )

    def check() -> str:
        try:
            launcher_argv(launcher, max_ranks)
            return ""
        except LauncherNotFound as exc:
            return str(exc)

    for worker, problem in client.run(check).items():
        if problem:
            raise StudyError("launcher.command", f"on worker {worker}: {problem}")
