"""One forkserver per process, preloaded with torch and the native backend: the deep check's roles
(``tprimat.backends.native.deep``) and the local launcher's ranks (``tprimat.execute.spawn``) are forked from it,
so that each costs its own work, not a fresh interpreter's imports. A fresh rank interpreter paid about 3.5 s of CPU
before its first step (torch 1.4 s, torch._dynamo 2 s, which every optimizer's constructor imports and every
meta-device op reaches; 2026-11-29, 2 cores): a 4-rank run on a 2-core machine, 14 s.

The forkserver is a fresh interpreter itself (multiprocessing's ``forkserver`` start method): it imports, never runs a
step, and holds no process group, mesh, CUDA context or thread pool, so a child starts as clean as a new process
would (PyTorch's advice for CUDA: spawn or forkserver, never fork once CUDA is initialised). A child inherits the
forkserver's environment as it was when the forkserver started; what must be current (a rank's environment) is
passed to it and set first.
"""

from __future__ import annotations

import multiprocessing

PRELOAD = ["torch", "torch._dynamo", "torch.distributed.tensor", "torch.testing._internal.distributed.fake_pg",
           "torch._subclasses.fake_tensor", "torch.distributed._tools.mem_tracker",
           "tprimat.backends.native.train", "tprimat.backends.native.parallelize", "tprimat.spec.plan"]


def forkserver(*also: str):
    """The forkserver context (started on first use, kept for this process's later children); ``also``: modules
    its first user preloads besides ``PRELOAD`` (the local launcher its rank's entry point)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*PRELOAD, *also])
    return context
