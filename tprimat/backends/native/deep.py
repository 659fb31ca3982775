"""Fake-world validation: one rank of each role (each pipeline stage) of the real native layout, built for the
full-size model at the requested world size on this CPU, over torch's fake process group (collectives are
no-ops) with the model on the meta device (nothing is allocated). What it measures comes from the real
sharded modules: the local shard of every parameter as TP, FSDP2 and the pipeline split left it. A layout that
cannot build (a DTensor placement error, an uneven split) fails here with the framework's own reason.

One role per process: a process group and its device meshes are process-wide state. The processes are forked
from one forkserver that has imported torch and the native backend once (``tprimat.backends.native.forkserver``;
the local launcher's ranks come from the same one), so a role costs its build, not a fresh interpreter's imports;
the forkserver never ran a step, so each child starts with no process group, mesh or thread pool.
``python -m tprimat.backends.native.deep SPEC_JSON RANK`` measures one role from a shell.
"""

from __future__ import annotations

import contextlib
import json
import sys
import traceback
from typing import Optional

from tprimat.backends.native.forkserver import forkserver

GIB = 2**30


def role_ranks(pp: int, dp: int, tp: int) -> list[int]:
    """The first rank of each pipeline stage (mesh order pp, dp, tp): ranks of one stage hold equal shards."""
    return [stage * dp * tp for stage in range(pp)]


def local_numel(param) -> int:
    from torch.distributed.tensor import DTensor

    return param.to_local().numel() if isinstance(param, DTensor) else param.numel()


def measure_rank(spec_dict: dict, rank: int, activations: bool = True) -> dict:
    """This process becomes ``rank`` of the spec's world over the fake backend and builds its shards on meta."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from tprimat.backends.native.model import Decoder
    from tprimat.backends.native.parallelize import make_layout, parallelize
    from tprimat.spec.build import build_spec
    from tprimat.spec.detect import DetectedHardware
    from tprimat.spec.plan import make_plan
    from tprimat.spec.schema import lora_of

    hw = DetectedHardware("cpu", "fake world", 1, 0.0, None)
    spec = build_spec(spec_dict)
    plan = make_plan(spec, hw)
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=plan.world_size)
    try:
        layout = make_layout(plan, torch.device("cpu"))
        with torch.device("meta"):
            model = Decoder(spec.model, spec.training.seed, lora_of(spec))
        model = parallelize(model, spec, layout, torch.device("cpu"), allocate=False)
        params = list(model.parameters())
        numel = sum(local_numel(p) for p in params)
        trained = sum(local_numel(p) for p in params if p.requires_grad)  # LoRA: the adapters alone
        element = params[0].element_size() if params else 4
        traced, why = trace_by_depth(spec, layout) if activations else (None, "not traced (states only)")
    finally:
        dist.destroy_process_group()
    return {"rank": rank, "stage": layout.pp_rank, "params": numel,
            "weights_gib": numel * element / GIB, "grads_gib": trained * element / GIB,  # grads take the param dtype
            "optimizer_gib": 2 * trained * element / GIB,  # AdamW: exp_avg and exp_avg_sq, the param dtype
            "activations_gib": traced, "activations_note": why}


def trace_by_depth(spec, layout, depths: Optional[tuple[int, int]] = None) -> tuple[Optional[float], Optional[str]]:
    """The stage's activation peak, traced on copies of the stage with ``p`` and ``2p`` layers and extrapolated
    linearly to its own depth: decoder layers are identical, so every layer adds the same saved tensors (and
    autocast weight copies) to the peak at the start of the backward, whatever the depth (``p``: 2 under
    selective recompute, which alternates layers, else 1). Tracing a whole 80-layer stage takes minutes; two
    shallow copies take seconds. A stage of at most ``2p`` layers is traced whole."""
    import torch

    from tprimat.backends.native.model import Decoder
    from tprimat.backends.native.parallelize import parallelize
    from tprimat.spec.build import build_spec, spec_to_dict
    from tprimat.spec.flops import stages_of
    from tprimat.spec.schema import ac_period, lora_of

    period = ac_period(spec.training.ac_frequency) if spec.training.activation_checkpointing == "selective" else 1
    layers = max(stages_of(spec))  # the stage with the most
    shallow, deeper = depths or (period, 2 * period)
    peaks = []
    for depth in ((layers,) if layers <= deeper else (shallow, deeper)):
        copy = spec_to_dict(spec)
        copy["model"]["num_layers"] = depth * layout.pp
        copy["parallelism"].update(account_for_embedding_in_pipeline_split=False,  # depth layers on every stage
                                   account_for_loss_in_pipeline_split=False)
        small = build_spec(copy)
        with torch.device("meta"):
            model = Decoder(small.model, small.training.seed, lora_of(small))
        model = parallelize(model, small, layout, torch.device("cpu"), allocate=False)
        peak, why = trace_activations(model, small, layout)
        if peak is None:
            return None, why
        peaks.append(peak)
    if len(peaks) == 1:
        return peaks[0], None
    per_layer = (peaks[1] - peaks[0]) / (deeper - shallow)
    return peaks[0] + (layers - shallow) * per_layer, None


def trace_activations(model, spec, layout) -> tuple[Optional[float], Optional[str]]:
    """Peak activation and temporary memory of one micro batch's forward and backward on this rank, traced by
    ``torch.distributed._tools.MemTracker`` over fake tensors (no memory used), under the spec's precision and
    recompute; (None, why) where the tracer cannot follow the layout."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

    from tprimat.backends.native.parallelize import uses_autocast
    from tprimat.backends.native.train import NativeTrainer

    tr, cfg = spec.training, spec.model
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            model.to_empty(device="cpu")
            shape = (tr.micro_batch_size, tr.seq_length)
            inputs = torch.randint(0, cfg.vocab_size, shape) if layout.first_stage else \
                torch.randn(*shape, cfg.hidden_size, requires_grad=True)
            tracker = MemTracker()
            tracker.track_external(model)
            autocast = torch.autocast("cpu", dtype=torch.bfloat16) if uses_autocast(spec, layout) else \
                contextlib.nullcontext()
            with tracker:
                with autocast:
                    out = model(inputs)
                if layout.last_stage:  # the training loss itself: its fp32 logits and their gradient count
                    NativeTrainer._cross_entropy(out, torch.randint(0, cfg.vocab_size, shape)).backward()
                else:  # a stage's output gradient, as the next stage would send it
                    out.backward(torch.ones_like(out))
            peak = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]
    except Exception as exc:  # noqa: BLE001 - the tracer's limits are stated, the layout still built
        return None, f"not traced: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return (peak[_MemRefType.ACT] + peak[_MemRefType.TEMP]) / GIB, None


def deep_check(spec_dict: dict, pp: int, dp: int, tp: int, activations: bool = True,
               timeout_s: float = 300) -> tuple[list[dict], Optional[str]]:
    """(one measurement per role, None) or (what was measured, the layout's failure in one line)."""
    from tprimat.results.progress import progress

    roles, ranks = [], role_ranks(pp, dp, tp)
    with progress(len(ranks), "deep check: stage") as advance:
        for rank in ranks:
            measured, failure = build_role(spec_dict, rank, activations, timeout_s)
            if failure is not None:
                return roles, failure
            roles.append(measured)
            advance(f"{len(roles) + 1} of {len(ranks)}")
    return roles, None


def answer(conn, function, args: tuple) -> None:
    """In the forked process: (True, ``function(*args)``) or (False, the exception's last traceback line)."""
    try:
        conn.send((True, function(*args)))
    except BaseException as error:  # noqa: BLE001 - whatever failed goes back as one line
        last = traceback.format_exception_only(type(error), error)[-1]  # "Type: message", as a traceback ends
        conn.send((False, " ".join(part.strip() for part in last.splitlines() if part.strip())))
    finally:
        conn.close()


def in_fresh_process(function, args: tuple, timeout_s: float, name: str = "tprimat-role") -> tuple[bool, object]:
    """``function(*args)`` (picklable, as its answer) in a process of its own forked from the preloaded
    forkserver: (True, its answer) or (False, its failure in one line: the exception, no answer in time, or the
    exit code of a process that died before answering). The process inherits the forkserver's environment (as
    it was when the forkserver started) and writes to this process's terminal."""
    context = forkserver()
    receive, send = context.Pipe(duplex=False)
    proc = context.Process(target=answer, args=(send, function, args), name=name)
    answered = False
    try:
        proc.start()
        send.close()
        answered = receive.poll(timeout_s)  # True at an answer, and at the pipe's end (the process died)
        ok, got = receive.recv() if answered else (False, f"no answer within {timeout_s:g} s")
    except EOFError:  # it died before answering: a crash in native code, a kill
        ok, got = False, None
    finally:
        receive.close()
        send.close()  # both ends closed even where start() raised (a function or argument pickle cannot send)
        if proc.pid is not None:
            proc.join(30 if answered else 0)  # an answered process is exiting
            if proc.is_alive():
                proc.kill()
                proc.join()
    return (ok, got) if ok or got else (False, f"exit {proc.exitcode}")


def build_role(spec_dict: dict, rank: int, activations: bool, timeout_s: float) -> tuple[Optional[dict], Optional[str]]:
    """One role's measurement in its own process, or the layout's failure in one line."""
    ok, got = in_fresh_process(measure_rank, (spec_dict, rank, activations), timeout_s, f"deep-check-rank{rank}")
    if ok:
        return got, None
    if str(got).startswith("no answer"):  # slow or stuck, not a layout's refusal
        return None, f"rank {rank} of the deep check gave {got} (a loaded machine, or a hang)"
    return None, f"rank {rank} cannot build its layout: {got}"


def measured_memory(roles: list[dict], overhead_gib: float, in_flight: float = 1) -> dict:
    """The deep check's roles as the plan's measured memory: the heaviest stage's model states and the largest
    traced activation peak (per device, GiB), the runtime overhead the estimate assumes, and each stage's own.
    The trace covers one micro batch; what the run will hold counts the schedule's micro batches in flight
    (``in_flight``: pp under 1F1B on the first stage, ``tprimat.spec.memory.in_flight_micro_batches``), each with
    the traced peak: an upper bound, since the peak's transient part is held once. The one-micro-batch figure
    stays as its own field (``memory_measured_one_micro_batch_gib``)."""
    states = max(r["weights_gib"] + r["grads_gib"] + r["optimizer_gib"] for r in roles)
    heaviest = max(roles, key=lambda r: r["weights_gib"] + r["grads_gib"] + r["optimizer_gib"])
    traced = [r["activations_gib"] for r in roles if r["activations_gib"] is not None]
    activations = max(traced) if traced else None
    notes = sorted({r["activations_note"] for r in roles if r.get("activations_note")})
    one = states + activations + overhead_gib if activations is not None else None
    held = states + activations * in_flight + overhead_gib if activations is not None else None
    return {"memory_measured_gib": held, "memory_measured_one_micro_batch_gib": one,
            "memory_measured": {"micro_batches_in_flight": in_flight,
                                "weights_gib": heaviest["weights_gib"], "grads_gib": heaviest["grads_gib"],
                                "optimizer_gib": heaviest["optimizer_gib"], "states_gib": states,
                                "activations_gib": activations, "overhead_gib": overhead_gib,
                                "activations_note": "; ".join(notes) or None,
                                "stages": [{k: r[k] for k in ("rank", "stage", "params", "weights_gib",
                                                              "activations_gib")} for r in roles],
                                "method": "native layout built full size over torch's fake process group on the "
                                          "meta device; activations of one micro batch traced by MemTracker over "
                                          "fake tensors, times the schedule's micro batches in flight"}}


if __name__ == "__main__":
    print(json.dumps(measure_rank(json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3:4] != ["False"])))
