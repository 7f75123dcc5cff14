"""`srift calibrate comm`: measure this machine's all-reduce and broadcast and write a cluster file."""

from __future__ import annotations

from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    sub = typer.Typer(help="Measure your own machines so predictions use real numbers.", no_args_is_help=True)
    app.add_typer(sub, name="calibrate")

    @sub.command("comm")
    def comm(
        backend: str = typer.Option("gloo", "--backend", help="gloo (CPU processes) or nccl (one GPU per process)."),
        nproc: int = typer.Option(2, "--nproc", help="Worker processes."),
        output: str = typer.Option("local.yaml", "-o", "--output", help="Cluster file to write."),
        sizes: Optional[str] = typer.Option(None, "--sizes", help="Comma-separated message sizes in bytes (default 1 KiB..64 MiB)."),
        reps: int = typer.Option(10, "--reps", help="Timed repetitions per size."),
        network: str = typer.Option("ethernet", "--network", help="Network between machines under torchrun: ethernet, efa or infiniband."),
    ) -> None:
        """Measure all-reduce and broadcast time vs message size and write a cluster YAML usable with --cluster.

        Several machines: run it under torchrun on each (``torchrun --nnodes N --node_rank R
        --nproc_per_node G --master_addr HOST --master_port PORT -m srift.cli calibrate comm
        --backend nccl``); --nproc is then ignored.
        """
        from srift.errors import SriftError

        try:
            import torch  # noqa: F401
        except ImportError:
            raise SriftError("`srift calibrate comm` needs torch, which is not installed.", "pip install 'srift[torch]'.") from None
        from srift.profiling.comm import calibrate

        size_list = None
        if sizes:
            try:
                size_list = [int(s) for s in sizes.split(",") if s.strip()]
            except ValueError:
                raise SriftError(f"--sizes '{sizes}' is not a comma-separated list of byte counts.", "e.g. --sizes 1024,1048576.") from None
            if len(size_list) < 2 or min(size_list) < 4:
                raise SriftError("--sizes needs at least two sizes of 4 bytes or more.", "e.g. --sizes 1024,1048576.")
        if reps < 1:
            raise SriftError("--reps must be at least 1.", "pass --reps 5 or more.")
        if network not in ("ethernet", "efa", "infiniband"):
            raise SriftError(f"unknown network '{network}'.", "use --network ethernet, efa or infiniband.")
        doc = calibrate(backend, nproc, output, size_list, reps, network)
        if doc is None:  # a torchrun rank other than 0: rank 0 writes
            return
        c = doc["comm_calibration"]
        for s, t in zip(c["sizes_bytes"], c["times_s"]):
            print(f"  {s:>12,d} B  {t * 1e3:9.3f} ms  {s / t / 1e9:7.3f} GB/s")
        print(f"Wrote {output}: use it with `srift predict --cluster {output}`.")
