"""MLPerf Training result logs: one ``:::MLLOG {json}`` record per line (mlperf-logging). Hyperparameters become
facts; each ``block_start``..``block_stop`` becomes one step record (the optimizer step at the block's end),
with the block's throughput as printed:

- ``tracked_stats {"throughput": x}`` (AMD's callbacks): samples/s of the whole system; the step time is then
  global_batch_size / x, computed from the logged batch size.
- ``tracked_stats {"train_step_time": t}`` without a loss (mlperf_common's block-level record): seconds per
  step. Records that also carry ``reduced_train_loss`` are per-interval (every few steps) and are kept inside
  their block; validation timings are not training throughput and are ignored.
- A block with only per-interval records (no block-level time): the median of its intervals' step times.
- A block left open (``block_start`` again, or the log's end, before its ``block_stop``: NVIDIA's 256- and
  512-GPU llama31_405b logs of v5.0 close only their last block) is closed there with the steps it has, and says
  so (``reported.closed_by``); whether the run counts is its ``run_stop``'s, as MLPerf's rules have it.
"""

from __future__ import annotations

import json
import math
import re
import statistics

from tprimat.logs.clean import Line
from tprimat.logs.facts import state
from tprimat.logs.stream import Step, StreamParser, new_step

MARK = ":::MLLOG"
HYPERPARAMETERS = {
    "global_batch_size": "training.global_batch_size", "max_sequence_length": "training.seq_length",
    "opt_base_learning_rate": "training.optimizer.lr", "opt_adamw_beta_1": "training.optimizer.beta1",
    "opt_adamw_beta_2": "training.optimizer.beta2", "opt_adamw_epsilon": "training.optimizer.eps",
    "opt_adamw_weight_decay": "training.optimizer.weight_decay", "opt_gradient_clip_norm": "training.optimizer.grad_clip",
    "opt_learning_rate_warmup_steps": "training.optimizer.warmup_steps", "seed": "training.seed",
    "gradient_accumulation_steps": "mlperf.gradient_accumulation_steps",
}
# MLPerf benchmark names -> the model config that is that architecture.
BENCHMARK_MODELS = {"llama31_8b": "llama", "llama31_405b": None, "llama2_70b_lora": None}
# Sequence lengths a benchmark fixes where its logs do not state one (``max_sequence_length``): llama2_70b_lora's
# samples are SCROLLS GovReport sequences packed or padded to 8,192 tokens (MLPerf Training rules, the benchmark's
# reference: max_seq_length 8192), so its tokens count the padding as the benchmark does.
BENCHMARK_SEQUENCES = {"llama2_70b_lora": (8192, "MLPerf Training llama2_70b_lora: 8,192-token sequences (the "
                                                 "reference's max_seq_length; the log states none)")}
RUN_KEYS = ("submission_benchmark", "submission_org", "submission_platform", "submission_division",
            "submission_status")


def finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class MlperfParser(StreamParser):
    format = "mlperf"
    MEANT = re.compile(r":::MLLOG ")  # every MLLOG record

    def __init__(self) -> None:
        super().__init__()
        self.block: dict = {}
        self.extra = {"eval_accuracy": [], "intervals": 0}
        self.last_step = 0

    def read(self, line: Line) -> list[Step]:
        text = line.text
        at = text.find(MARK)
        if at < 0:
            return []
        record = json.loads(text[at + len(MARK):])
        if not isinstance(record, dict):
            return []
        key, value, meta = record.get("key"), record.get("value"), record.get("metadata") or {}
        if key in HYPERPARAMETERS and finite(value):
            state(self.facts, HYPERPARAMETERS[key], value, f"log: MLLOG {key}")
        elif key in RUN_KEYS:
            self.run_key(key, value)
        elif key == "tracked_stats" and isinstance(value, dict):
            self.tracked(value, meta, record.get("time_ms"))
        elif key == "block_stop":
            return self.block_stop(meta)
        elif key == "block_start":
            closed = self.block_stop({}, closed_by="the next block_start") if self.block else []
            self.block = {"start_ms": record.get("time_ms"), "intervals": [], "start_meta": meta}
            return closed
        else:
            self.run_event(key, value, meta, record.get("time_ms"))
        return []

    def finish(self) -> list[Step]:
        closed = self.block_stop({}, closed_by="the end of the log") if self.block else []
        known = BENCHMARK_SEQUENCES.get(self.extra.get("submission_benchmark"))
        if known is not None:
            state(self.facts, "training.seq_length", known[0], known[1])  # the log's own figure, where stated, first
        if self.failure and self.extra.get("status") == "success":
            self.extra["traceback_in_log"] = self.failure[0][:300]  # kept, not the run's verdict (below)
        return closed + super().finish()

    @property
    def error(self):
        """run_stop's status is MLPerf's verdict on a run: a traceback the log also prints (an optional import's
        warning, say) does not fail a run that stopped with ``success``; it stays in ``source.traceback_in_log``."""
        return None if self.extra.get("status") == "success" else super().error

    def run_key(self, key: str, value) -> None:
        self.extra.setdefault(key, value)
        if key == "submission_benchmark" and BENCHMARK_MODELS.get(value):
            state(self.facts, "model", BENCHMARK_MODELS[value], f"log: MLLOG submission_benchmark {value}")

    def run_event(self, key, value, meta: dict, time_ms) -> None:
        if key == "run_start":
            self.extra.setdefault("run_start_ms", time_ms)
        elif key == "run_stop":
            self.extra.update(run_stop_ms=time_ms, status=meta.get("status"))
        elif key == "eval_accuracy" and finite(value):
            at = {k: meta[k] for k in ("samples_count", "epoch_num") if finite(meta.get(k))}  # AMD / NVIDIA keys
            self.extra["eval_accuracy"].append({"samples_count": at.get("samples_count"), **at, "value": value})
            self.extra["final_eval_accuracy"] = value
        elif key == "target_accuracy" and finite(value):
            self.extra.setdefault("target_accuracy", value)  # where a log states its quality target
        elif key == "train_samples" and finite(value):
            # kept as logged, never read as samples trained: AMD logs the dataset's size here, NVIDIA the samples
            self.extra.setdefault("train_samples", {"value": value, "note": "as logged: its meaning differs by "
                                                    "submitter (dataset size or samples trained); not used"})

    def tracked(self, value: dict, meta: dict, time_ms) -> None:
        if finite(value.get("throughput")):
            self.block.update(samples_per_s=value["throughput"], samples_count_or_step=meta.get("step"), time_ms=time_ms)
        elif finite(value.get("train_step_time")) and "reduced_train_loss" in value:
            self.block.setdefault("intervals", []).append((value["train_step_time"], value.get("reduced_train_loss")))
            self.extra["intervals"] += 1
        elif finite(value.get("train_step_time")):
            self.block.update(train_step_time_s=value["train_step_time"], time_ms=time_ms,
                              samples_count_or_step=meta.get("samples_count"))

    def block_stop(self, meta: dict, closed_by: str = "block_stop") -> list[Step]:
        block, self.block = self.block, {}
        intervals = block.get("intervals") or []
        if "samples_per_s" not in block and "train_step_time_s" not in block and not intervals:
            return []
        gbs = (self.facts.get("training.global_batch_size") or (None,))[0]
        step = meta.get("step")
        if step is None and finite(meta.get("samples_count")) and gbs:
            step = meta["samples_count"] / gbs  # AMD: cumulative samples at the block's end
        if step is None and closed_by != "block_stop":  # an open block: its start's place plus its first step
            started = (block.get("start_meta") or {}).get("samples_count")
            step = started / gbs + 1 if finite(started) and gbs else None
        if not finite(step) or (closed_by != "block_stop" and int(step) <= self.last_step):
            step = self.last_step + 1
        self.last_step = max(self.last_step, int(step))
        reported = {k: block[k] for k in ("samples_per_s", "samples_count_or_step", "time_ms", "train_step_time_s")
                    if k in block}
        reported["block_stop_step"] = meta.get("step")
        if closed_by != "block_stop":
            reported["closed_by"] = closed_by
        if intervals:
            reported["interval_step_times_s"] = [t for t, _ in intervals]
        time_s = block.get("train_step_time_s")
        if time_s is None and "samples_per_s" not in block:
            time_s = statistics.median(t for t, _ in intervals)
            reported["step_time_s_from"] = "the median of the block's per-interval train_step_time"
        elif time_s is None and gbs:
            time_s = gbs / block["samples_per_s"]
            reported["step_time_s_from"] = "global_batch_size / tracked_stats throughput"
        loss = intervals[-1][1] if intervals and finite(intervals[-1][1]) else None
        return self.offer(new_step(int(step), reported, loss=loss, step_time_s=time_s), None)
