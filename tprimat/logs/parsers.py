"""One parser per log format. Each returns step dicts keyed by tprimat's step-record names (step, loss, lr,
grad_norm, step_time_s, memory_gib, peak_memory_gib) plus ``reported``: what the framework itself printed
(TFLOP/s, tokens/s, MFU, batch size, skipped iterations, running averages). Parsers never raise on bad input:
a line they cannot read is skipped."""

from __future__ import annotations

import re
from typing import Callable, Optional

from tprimat.logs.clean import number

Step = dict

# ---------------------------------------------------------------- Megatron-LM, Megatron-Bridge, Primus
ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)")
MEMORY = re.compile(r"\(after (\d+) iterations\) memory \(MB\) \| allocated: ([\d.]+) \| max allocated: ([\d.]+)")
MEGATRON_FIELDS = {
    "elapsed time per iteration (ms)": "step_time_ms", "learning rate": "lr", "lm loss": "loss",
    "grad norm": "grad_norm", "global batch size": "global_batch_size", "consumed samples": "consumed_samples",
    "loss scale": "loss_scale", "number of skipped iterations": "skipped_iterations",
    "number of nan iterations": "nan_iterations", "throughput per GPU (TFLOP/s/GPU)": "tflops_per_gpu",
    "compute per GPU (TFLOP/s/GPU)": "tflops_per_gpu", "tokens per GPU (tokens/s/GPU)": "tokens_per_s_per_gpu",
    "tokens/sec/gpu": "tokens_per_s_per_gpu", "tokens/s/GPU inst/harmonic mean": "tokens_per_s_per_gpu",
    "energy per GPU (J/iter/GPU)": "energy_j_per_iter_per_gpu", "power per GPU (W/GPU)": "power_w_per_gpu",
}


def _current_and_average(text: str) -> tuple[Optional[float], Optional[float]]:
    """'32025.5/32117.1' or '238.4 (avg 231.0)' -> (current, running average); '9.1' -> (9.1, None)."""
    avg = re.match(r"\s*([-\d.eE+,]+)\s*\(avg\s*([-\d.eE+,]+)\)", text)
    if avg:
        return number(avg.group(1)), number(avg.group(2))
    parts = text.split("/")
    if len(parts) == 2:
        return number(parts[0]), number(parts[1])
    return number(text), None


def parse_megatron(lines: list[str]) -> list[Step]:
    steps: dict[int, Step] = {}
    memory: dict[int, tuple[float, float]] = {}
    for line in lines:
        mem = MEMORY.search(line)
        if mem:
            memory.setdefault(int(mem.group(1)), (float(mem.group(2)) / 1024, float(mem.group(3)) / 1024))
            continue
        match = ITERATION.search(line)
        if not match or int(match.group(1)) in steps:  # lines printed by several ranks: first one wins
            continue
        reported: dict = {"total_iterations": int(match.group(2))}
        for field in match.group(3).split("|"):
            if ":" not in field:
                continue
            key, value = (s.strip() for s in field.rsplit(":", 1)) if field.count(":") > 1 and "(" not in field.split(":")[0] \
                else (s.strip() for s in field.split(":", 1))
            name = MEGATRON_FIELDS.get(key)
            if name is None:
                continue
            current, average = _current_and_average(value)
            reported[name] = current
            if average is not None:
                reported[f"{name}_running_avg"] = average
        step = int(match.group(1))
        ms = reported.pop("step_time_ms", None)
        steps[step] = {"step": step, "loss": reported.pop("loss", None), "lr": reported.pop("lr", None),
                       "grad_norm": reported.pop("grad_norm", None),
                       "step_time_s": ms / 1000 if ms is not None else None, "reported": reported}
        if "step_time_ms_running_avg" in reported:
            reported["step_time_s_running_avg"] = reported.pop("step_time_ms_running_avg") / 1000
    for step, (allocated, peak) in memory.items():
        if step in steps:
            steps[step].update(memory_gib=allocated, peak_memory_gib=peak)
    return [steps[k] for k in sorted(steps)]


# ---------------------------------------------------------------- NeMo 2 (Lightning printer), NeMo 1 bar
NEMO2 = re.compile(r"Training epoch (\d+), iteration (\d+)/(\d+) \|(.*)")
NEMO1_BAR = re.compile(r"(\d+)/(\d+) \[([\d:]+)<[^,]*,\s*([\d.]+)(it/s|s/it),\s*(.*)\]")


def parse_nemo(lines: list[str]) -> list[Step]:
    steps: dict[float, Step] = {}
    for line in lines:
        match = NEMO2.search(line)
        if match:
            fields = dict(_kv(f, ":") for f in match.group(4).split("|") if ":" in f)
            key = number(fields.get("global_step", "")) if "global_step" in fields else int(match.group(2))
            if key is None or key in steps:
                continue
            steps[key] = {"step": int(key), "loss": number(fields.get("reduced_train_loss", "")),
                          "lr": number(fields.get("lr", "")), "grad_norm": number(fields.get("grad_norm", "")),
                          "step_time_s": number(fields.get("train_step_timing in s", "")),
                          "reported": {"epoch": int(match.group(1)), "iteration_in_epoch": int(match.group(2)),
                                       "global_batch_size": number(fields.get("global_batch_size", "")),
                                       "consumed_samples": number(fields.get("consumed_samples", "")),
                                       "tflops_per_gpu": number(fields.get("TFLOPS_per_GPU", ""))}}
            continue
        bar = NEMO1_BAR.search(line)
        if bar and "reduced_train_loss" in bar.group(6):
            key = int(bar.group(1))
            if key in steps:
                continue
            fields = dict(_kv(f, "=") for f in bar.group(6).split(",") if "=" in f)
            rate = float(bar.group(4))
            it_per_s = rate if bar.group(5) == "it/s" else 1 / rate
            steps[key] = {"step": key, "loss": number(fields.get("reduced_train_loss", "")), "lr": None,
                          "grad_norm": None, "step_time_s": None,
                          "reported": {"it_per_s": it_per_s, "loss_smoothed": number(fields.get("loss", "")),
                                       "global_step_printed": fields.get("global_step"),
                                       "val_loss": number(fields.get("val_loss", "")), "elapsed": bar.group(3)}}
    return [steps[k] for k in sorted(steps)]


def _kv(field: str, sep: str) -> tuple[str, str]:
    key, _, value = field.partition(sep)
    return key.strip(), value.strip()


# ---------------------------------------------------------------- torchtitan
TITAN = re.compile(r"step:\s*(\d+)\s+loss:\s*([-\d.eE+naif]+)(.*)")


def parse_torchtitan(lines: list[str]) -> list[Step]:
    steps: dict[int, Step] = {}
    for line in lines:
        match = TITAN.search(line)
        if not match or int(match.group(1)) in steps:
            continue
        rest = match.group(3)
        grab = lambda pattern: (re.search(pattern, rest) or [None, None])[1]  # noqa: E731
        memory = re.search(r"memory:\s*([\d.]+)GiB\(([\d.]+)%\)", rest)
        tps = grab(r"(?:tps|wps):\s*([\d,.]+)")
        step = int(match.group(1))
        steps[step] = {"step": step, "loss": number(match.group(2)), "lr": None,
                       "grad_norm": number(grab(r"grad_norm:\s*([-\d.eE+]+)") or ""), "step_time_s": None,
                       "memory_gib": float(memory.group(1)) if memory else None,
                       "reported": {"tokens_per_s_per_gpu": number(tps or ""),
                                    "tflops_per_gpu": number(grab(r"tflops:\s*([\d.,]+)") or ""),
                                    "mfu_pct": number(grab(r"mfu:\s*([\w.%/]+)") or ""),
                                    "memory_pct": float(memory.group(2)) if memory else None}}
    return [steps[k] for k in sorted(steps)]


# ---------------------------------------------------------------- DeepSpeed
DS_STEP = re.compile(r"\[Rank 0\] step=(\d+), skipped=(\d+), lr=\[([^\]]*)\]")
DS_TIMER = re.compile(r"global_step=(\d+), RunningAvgSamplesPerSec=([\d.]+), CurrSamplesPerSec=([\d.]+), "
                      r"MemAllocated=([\d.]+)GB, MaxMemAllocated=([\d.]+)GB")
DS_LOSS = re.compile(r"\[Rank 0\] Loss: ([-\d.eE+]+)")


def parse_deepspeed(lines: list[str]) -> list[Step]:
    steps: dict[int, Step] = {}
    last: Optional[int] = None
    for line in lines:
        if (m := DS_STEP.search(line)):
            last = int(m.group(1))
            lr = number(m.group(3).split(",")[0])
            steps.setdefault(last, {"step": last, "loss": None, "lr": lr, "grad_norm": None, "step_time_s": None,
                                    "reported": {"skipped_cumulative": int(m.group(2))}})
        elif (m := DS_TIMER.search(line)) and int(m.group(1)) in steps:
            s = steps[int(m.group(1))]
            s.update(memory_gib=float(m.group(4)), peak_memory_gib=float(m.group(5)))
            s["reported"].update(samples_per_s=float(m.group(3)), samples_per_s_running_avg=float(m.group(2)))
        elif (m := DS_LOSS.search(line)) and last in steps and steps[last]["loss"] is None:
            steps[last]["loss"] = number(m.group(1))
    return [steps[k] for k in sorted(steps)]


# ---------------------------------------------------------------- Hugging Face Trainer
HF_DICT = re.compile(r"\{'(loss|train_runtime)'.*")
HF_PAIR = re.compile(r"'(\w+)':\s*'?([-\d.eE+]+)'?")
HF_BAR = re.compile(r"^\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)")


def parse_hf(lines: list[str]) -> list[Step]:
    steps = _hf_dicts(lines)
    bars = [s["reported"].get("progress_bar_step") for s in steps]
    # The bar after a dict is its step only when logging every step (the bars then advance by exactly 1).
    if bars and None not in bars and all(b - a == 1 for a, b in zip(bars, bars[1:])):
        for s, bar in zip(steps, bars):
            s["step"] = bar
    return steps


def hf_final_summary(lines: list[str]) -> Optional[dict]:
    for line in lines:
        if line.startswith("{'train_runtime'"):
            return {k: float(v) for k, v in HF_PAIR.findall(line) if number(v) is not None}
    return None


def _hf_dicts(lines: list[str]) -> list[Step]:
    steps: list[Step] = []
    waiting: Optional[Step] = None
    for line in lines:
        match = HF_DICT.search(line)
        if match:
            values = {k: float(v) for k, v in HF_PAIR.findall(match.group(0)) if number(v) is not None}
            if match.group(1) == "train_runtime" or "loss" not in values:
                continue
            waiting = {"step": len(steps) + 1, "loss": values.get("loss"), "lr": values.get("learning_rate"),
                       "grad_norm": values.get("grad_norm"), "step_time_s": None,
                       "reported": {"epoch": values.get("epoch"),
                                    "tokens_per_s": values.get("train_tokens_per_second"),
                                    "num_input_tokens_seen": values.get("num_input_tokens_seen"),
                                    "train_runtime_so_far_s": values.get("train_runtime"), "log_index": len(steps) + 1}}
            steps.append(waiting)
            continue
        bar = HF_BAR.search(line)
        if bar and waiting is not None:
            waiting["reported"]["progress_bar_step"] = int(bar.group(1))
            waiting = None
    return steps


PARSERS: dict[str, Callable[[list[str]], list[Step]]] = {
    "megatron": parse_megatron, "primus": parse_megatron, "nemo": parse_nemo, "torchtitan": parse_torchtitan,
    "deepspeed": parse_deepspeed, "hf": parse_hf,
}

# Evidence that a text is in a format: (pattern, weight).
SIGNATURES = {
    "primus": [(re.compile(r"rank-\d+/\d+\]"), 1), (re.compile(r"hip mem usage|\[aiter\]|primus", re.I), 3)],
    "megatron": [(ITERATION, 2), (re.compile(r"lm loss:"), 2)],
    "nemo": [(NEMO2, 5), (re.compile(r"reduced_train_loss="), 5), (re.compile(r"\[NeMo [IWE]"), 1)],
    "torchtitan": [(TITAN, 5), (re.compile(r"\[titan\]|torchtitan"), 2)],
    "deepspeed": [(DS_STEP, 5), (DS_TIMER, 5), (re.compile(r"\bdeepspeed\b", re.I), 1)],
    "hf": [(HF_DICT, 5), (re.compile(r"\*\*\*\*\* Running training \*\*\*\*\*"), 5)],
}


def detect(raw_text: str) -> Optional[str]:
    scores = {fmt: sum(weight * len(p.findall(raw_text)) for p, weight in sigs) for fmt, sigs in SIGNATURES.items()}
    if scores["primus"] and scores["megatron"] == 0 and scores["torchtitan"]:
        scores["primus"] = 0  # torchtitan re-emitted through Primus's logger is torchtitan's format
    if scores["primus"] and scores["megatron"]:
        scores["primus"] += scores["megatron"]
    best = max(scores, key=scores.get)
    return best if scores[best] > 0 else None


FAILURE = re.compile(r"Traceback \(most recent call last\)|ChildFailedError|OutOfMemoryError|NCCL Error|"
                     r"[Ee]xited with (exit )?code [1-9]|SIGABRT|Segmentation fault|\[ERROR\]")


def failure_excerpt(lines: list[str], limit: int = 20) -> Optional[str]:
    hits = [i for i, line in enumerate(lines) if FAILURE.search(line)]
    if not hits:
        return None
    first = hits[0]
    excerpt = [line for line in lines[first: first + limit] if line]
    return "\n".join(excerpt)
