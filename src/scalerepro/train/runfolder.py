"""Names the ranks and their supervisor share: the files of a run folder and the signals that stop a run.

Kept free of torch and MPI, so ``scalerepro supervise`` (one per training
job, beside ranks that are importing torch on the same cores) starts in a
fraction of a second.
"""

from __future__ import annotations

import signal

CHECKPOINT = "checkpoint.pt"
RANKS = "ranks.json"  # rank, host, node and pid of every rank, written by rank 0 once training starts
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # preemption and SLURM's time-limit warning
