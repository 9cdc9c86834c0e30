"""``search data``: record shards for ``[training] dataset = "shards:PATH"`` (docs/data.md).

    search data pack fashion-mnist data/fashion-shards
    search data pack data/fashion-png data/fashion-shards --shard-mb 8
    search data verify data/fashion-shards
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from search._console import err, out, print_error

data_app = typer.Typer(
    no_args_is_help=True,
    help="Pack a dataset as record shards (Arrow IPC) and check a packed one.",
)


@data_app.command()
def pack(
    source: Annotated[str, typer.Argument(
        help="a built-in dataset (digits, mnist1d, fashion-mnist, mnist5k), an ImageFolder "
        "directory (DIR/train/CLASS/*.png, optional DIR/test/...), or a module:function "
        "dataset plug-in")],
    dest: Annotated[Path, typer.Argument(help="a new or empty directory (or an unfinished "
                                         "packing of the same settings, which resumes)")],
    shard_mb: Annotated[float, typer.Option(help="size of a shard in MiB", min=0.001)] = 32.0,
    limit: Annotated[int | None, typer.Option(
        help="pack only the first N samples of each split (after the shuffle)", min=1)] = None,
    seed: Annotated[int, typer.Option(help="the train split's shuffle before sharding")] = 0,
    val_fraction: Annotated[float, typer.Option(
        help="validation split carved from train where the source has none", min=0.0,
        max=0.9)] = 0.1,
    task: Annotated[str, typer.Option(help="classification or regression")] = "classification",
    normalize: Annotated[str | None, typer.Option(
        help="MEAN/STD per channel, applied when read: (x - MEAN) / STD, e.g. 0.286/0.353 "
        "(images: after the scale to 0..1)")] = None,
) -> None:
    """Pack SOURCE into DEST as Arrow IPC shards with an index of counts and checksums."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from training.data._pack import pack as pack_shards
    from training.data._shards import ShardError

    if task not in ("classification", "regression"):
        print_error(f"--task {task!r}: expected classification or regression")
        raise typer.Exit(2)
    with Progress("packing", BarColumn(), MofNCompleteColumn(), "samples",
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        job = bar.add_task("pack", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(job, completed=done, total=total)

        try:
            index = pack_shards(source, dest, shard_mb=shard_mb, limit=limit, seed=seed,
                                val_fraction=val_fraction, task=task, normalize=normalize,
                                progress=progress)
        except (ShardError, OSError, ValueError, ImportError) as exc:
            print_error(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            raise typer.Exit(2) from None
    splits = ", ".join(f"{k} {v['samples']:,} in {len(v['shards'])} shard(s)"
                       for k, v in index["splits"].items())
    out.print(f"packed {escape(source)} into {escape(str(dest))}: {splits}; use "
              f'dataset = "shards:{escape(str(dest))}"', highlight=False, soft_wrap=True)


@data_app.command()
def verify(
    path: Annotated[Path, typer.Argument(help="a directory `search data pack` wrote")],
) -> None:
    """Check every shard of a packed dataset against its index (size and SHA-256)."""
    from training.data._shards import ShardError, check_shards, sha256_file

    try:
        index = check_shards(path)
    except ShardError as exc:
        print_error(str(exc))
        raise typer.Exit(2) from None
    bad = [s["file"] for v in index["splits"].values() for s in v["shards"]
           if sha256_file(path / s["file"]) != s["sha256"]]
    if bad:
        print_error(f"shards:{path}: {len(bad)} shard(s) differ from their checksum: "
                    f"{', '.join(bad[:5])} (pack again)")
        raise typer.Exit(1)
    n = sum(len(v["shards"]) for v in index["splits"].values())
    out.print(f"shards:{escape(str(path))}: {n} shard(s) match their checksums",
              highlight=False, soft_wrap=True)
