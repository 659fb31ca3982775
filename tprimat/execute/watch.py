"""Ranks that keep watch on each other through the rendezvous store: every wait bounded, and a rank that is lost
named by the rank that writes the result.

Bounds are torch.distributed's own: the process group's timeout, ``benchmark.init_timeout_s`` while the ranks meet
and through the first step (compilation, first allocations), ``benchmark.collective_timeout_s`` after it, on every
group (torchtitan's ``comm.init_timeout_seconds`` and ``comm.train_timeout_seconds``, 300 s and 100 s by default).
Under ``env://`` the store is made here, so that each rank can sign in with its node before the group forms: a
rendezvous that cannot form names the ranks that never signed in and the node Slurm placed each on. After the group
forms each rank beats once a second into the store on its own connection; when a collective fails, every rank that
can still reach the store says so, and rank 0 names the ranks that neither said so nor beat within a few beats."""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from datetime import timedelta
from typing import Optional

import torch.distributed as dist

from tprimat.execute.rank import slurm_placement

log = logging.getLogger("tprimat")

KEY = "tprimat"
BEAT_S = 1.0
QUIET_BEATS = 3  # a rank silent this many beats after a collective failed, and that did not report it, is lost
REPORT_TIMEOUT_S = 3.0  # a failing rank's last word to the store: never a long wait on a link that is gone


class RendezvousFailed(RuntimeError):
    """The ranks did not meet within ``benchmark.init_timeout_s``."""


class RanksLost(RuntimeError):
    """A collective failed on rank 0, and these ranks went silent."""


def named(ranks: list[int], hosts: dict[int, str]) -> str:
    return ", ".join(f"rank {r} on {hosts[r]}" if hosts.get(r) else f"rank {r}" for r in ranks)


class RankWatch:
    """This rank's part in the watch: sign-in, heartbeat, a failure's report, and (rank 0) who was lost."""

    def __init__(self, store, rank: int, world_size: int, host: str, beat_store=None) -> None:
        self.store, self.rank, self.world_size, self.host = store, rank, world_size, host
        self.beat_store = beat_store  # a second connection: a beat never waits behind the main thread's store call
        self.stopped = threading.Event()
        self.thread: Optional[threading.Thread] = None

    def key(self, kind: str, rank: int) -> str:
        return f"{KEY}/{kind}/{rank}"

    def sign_in(self) -> None:
        self.store.set(self.key("host", self.rank), self.host)

    def read(self, kind: str, rank: int) -> Optional[str]:
        key = self.key(kind, rank)
        return self.store.get(key).decode(errors="replace") if self.store.check([key]) else None

    def hosts(self) -> dict[int, str]:
        """Each rank's node as it signed in (ranks that never did are absent)."""
        return {r: host for r in range(self.world_size) if (host := self.read("host", r)) is not None}

    def start(self) -> "RankWatch":
        if self.beat_store is not None:
            self.thread = threading.Thread(target=self._beat, name="tprimat-heartbeat", daemon=True)
            self.thread.start()
        return self

    def _beat(self) -> None:
        count = 0
        while not self.stopped.is_set():
            count += 1
            try:
                self.beat_store.set(self.key("beat", self.rank), str(count))
            except Exception:  # noqa: BLE001 - the store out of reach for now (a stall, the link): the next beat tries
                pass
            self.stopped.wait(BEAT_S)

    def stop(self) -> None:
        self.stopped.set()

    def report(self, error: BaseException) -> None:
        """A failing rank's last word: it is alive and saw ``error`` (best effort, a short wait at most)."""
        try:
            self.store.set_timeout(timedelta(seconds=REPORT_TIMEOUT_S))
            self.store.set(self.key("failed", self.rank), f"{type(error).__name__}: {str(error)[:200]}")
        except Exception:  # noqa: BLE001 - the store cannot be reached: the silence names this rank
            pass

    def lost(self) -> list[int]:
        """Rank 0, after a collective failed: the ranks that neither reported the failure nor beat within
        QUIET_BEATS beats (it returns as soon as every other rank has done one or the other)."""
        others = [r for r in range(self.world_size) if r != self.rank]
        first = {r: self.read("beat", r) for r in others}
        deadline = time.monotonic() + QUIET_BEATS * BEAT_S
        while True:
            silent = [r for r in others if self.read("failed", r) is None and self.read("beat", r) == first[r]]
            if not silent or time.monotonic() >= deadline:
                return silent
            time.sleep(BEAT_S / 4)


def _store(env, timeout: timedelta, master: bool):
    """A connection to the rendezvous store, its keys under this attempt's prefix (torchrun's agent keeps one store
    across restarts: a restarted group must not read the last attempt's sign-ins, beats or reports)."""
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), env.world_size, master, timeout,
                          wait_for_workers=False)
    return dist.PrefixStore(f"tprimat/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


def meet(env, backend: str, host: str, init_timeout_s: float) -> RankWatch:
    """Form the default process group, bounded by ``init_timeout_s``; the watch that goes with it, started."""
    timeout = timedelta(seconds=init_timeout_s)
    init_method = os.environ.get("TPRIMAT_INIT_METHOD", "env://")
    if init_method != "env://":  # tprimat's own local ranks and one-node Slurm jobs: a file on a shared disk
        dist.init_process_group(backend, init_method=init_method, rank=env.rank, world_size=env.world_size,
                                timeout=timeout)
        return RankWatch(dist.distributed_c10d._get_default_store(), env.rank, env.world_size, host)
    where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    # torchrun's agent holds the store itself; otherwise rank 0 serves it (as torch's env:// rendezvous does)
    master = env.rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    try:
        store = _store(env, timeout, master)
    except (dist.DistError, RuntimeError) as exc:
        raise RendezvousFailed(f"rank {env.rank} on {host} could not reach the rendezvous at {where} within "
                               f"{init_timeout_s:g} s (benchmark.init_timeout_s): {str(exc).splitlines()[0][:200]}")
    watch = RankWatch(store, env.rank, env.world_size, host)
    watch.sign_in()
    try:
        dist.init_process_group(backend, store=dist.PrefixStore("default_pg", store), rank=env.rank,
                                world_size=env.world_size, timeout=timeout)
    except (dist.DistError, RuntimeError) as exc:
        raise RendezvousFailed(_not_met(watch, where, init_timeout_s, exc)) from None
    try:
        watch.beat_store = _store(env, timedelta(seconds=QUIET_BEATS * BEAT_S), False)
    except (dist.DistError, RuntimeError) as exc:  # the group formed: train on, unwatched (a failure is not named)
        log.warning("no heartbeat connection to %s: %s", where, str(exc).splitlines()[0][:200])
    return watch.start()


def _not_met(watch: RankWatch, where: str, init_timeout_s: float, exc: BaseException) -> str:
    signed = watch.hosts()
    missing = [r for r in range(watch.world_size) if r not in signed]
    placed = dict(enumerate(slurm_placement()))
    who = (f"{named(missing, placed)} never joined" if missing else
           f"every rank signed in ({named(sorted(signed), signed)}) but the group did not connect")
    return (f"the ranks did not meet at {where} within {init_timeout_s:g} s (benchmark.init_timeout_s): {who}: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")


def tighten(collective_timeout_s: float, done: set) -> None:
    """After each step: the timeout of every process group not yet in ``done`` (a repeat's new mesh included; its
    groups wait torch's default, 30 min on gloo, until its first step) becomes ``collective_timeout_s``. ``done``
    holds the groups themselves, so a later group never passes for a destroyed one."""
    for group in dist.distributed_c10d._world.pg_map.keys() - done:
        dist.distributed_c10d._set_pg_timeout(timedelta(seconds=collective_timeout_s), group)
        done.add(group)


def own_link_down() -> Optional[str]:
    """The interface this rank's collectives use (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME) when it has lost its
    carrier or is down, else None."""
    import psutil

    name = (os.environ.get("GLOO_SOCKET_IFNAME") or os.environ.get("NCCL_SOCKET_IFNAME") or "").split(",")[0]
    stats = psutil.net_if_stats().get(name) if name and not name.startswith("^") else None
    return name if stats is not None and not stats.isup else None


def on_failure(watch: RankWatch, exc: BaseException, collective_timeout_s: float) -> BaseException:
    """What a rank raises when its run broke. A rank whose own link is down says so (naming its node); rank 0 names
    the ranks that went silent with their nodes; the others report to rank 0 that they are alive and raise what
    they saw."""
    link = own_link_down()
    seen = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    if watch.rank != 0:
        watch.report(exc)
        return RanksLost(f"lost {watch.host}: rank {watch.rank}'s own link {link} is down: {seen}") if link else exc
    if watch.beat_store is None and not link:
        return exc
    silent = watch.lost() if watch.beat_store is not None and not link else []
    hosts = {**dict(enumerate(slurm_placement())), **watch.hosts()}
    reports = ((r, watch.read("failed", r)) for r in range(1, watch.world_size)) if watch.beat_store is not None else ()
    said = "".join(f"; {named([r], hosts)} saw {text}" for r, text in itertools.islice(
        ((r, text) for r, text in reports if text), 3))
    if not silent and not link:
        return RuntimeError(f"{seen}{said}") if said else exc
    lost = ([f"{watch.host} (rank 0's own link {link} is down)"] if link else []) + (
        [f"{named(silent, hosts)} (silent for {QUIET_BEATS * BEAT_S:g} s after the collective failed)"] if silent else [])
    return RanksLost(f"lost {'; '.join(lost)}, benchmark.collective_timeout_s={collective_timeout_s:g}: {seen}{said}")
