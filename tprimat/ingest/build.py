"""Parsed steps + stated facts -> a tprimat result (same schema, same metrics code as a live run).

Nothing is filled in from defaults: the spec holds what the log, a system description or the user states
(``tprimat.ingest.stated``), and every figure is computed only from stated facts, else taken as the
framework printed it (marked ``reported``), else null.
"""

from __future__ import annotations

import codecs
import contextlib
import gc
import hashlib
import json
from dataclasses import dataclass, field
from itertools import compress
from pathlib import Path
from typing import Callable, Optional, Sequence

from tprimat.ingest.derive import CANDIDATES, model_conf, plan_of, resolve, world_size
from tprimat.ingest.stated import Stated
from tprimat.logs.parsers import DETECT_BYTES, Parsed, detect, parse_file, parse_lines
from tprimat.logs.stepcolumns import StepColumns
from tprimat.logs.stream import Step
from tprimat.results.metrics import Columns, median, median_ratio, summarize
from tprimat.results.records import StepRecord, as_record, complete_step, complete_uniform
from tprimat.results.result import make_result, new_run_id
from tprimat.spec import flops
from tprimat.spec.build import SpecError, build_spec
from tprimat.spec.validate import check_choices, check_ranges

FRAMEWORK_OF = {"megatron": "megatron", "primus": "primus", "nemo": "nemo", "torchtitan": "torchtitan",
                "deepspeed": "deepspeed", "hf": "transformers", "mlperf": "mlperf"}
NO_WARMUP_FORMATS = ("mlperf",)  # MLPerf blocks start after the benchmark's own initialisation
STEP_WARMUP_FORMATS = ("tprimat",)  # the log marks each warm-up step (of every repeat)
AGREEMENT = 0.02  # computed and reported figures further apart than this get a warning
# settings a framework prints on every step line (Megatron's "global batch size", NeMo's global_batch_size): the
# same value on every step states the run's setting (a batch size ramped up over the run states none)
PRINTED_SETTINGS = {"global_batch_size": "training.global_batch_size"}


@dataclass
class Meta:
    """What a log does not say, from the command line, and how the entry point composes a config."""

    compose: Callable[[list[str]], dict]  # overrides -> plain config (tprimat.compose.compose: once a process each)
    overrides: list[str] = field(default_factory=list)  # Hydra-style: model=llama platform.gpu=h100 ...
    warmup_steps: Optional[int] = None
    system: Optional[dict] = None  # a system description (MLPerf systems JSON)

    @property
    def config_overrides(self) -> list[str]:
        return [o for o in self.overrides if not o.startswith("world_size=")]  # --devices is not a config key

    def problems(self) -> list[str]:
        """What the user states, checked by the rules a launch applies to the same keys (the typed boundary,
        the choices, the ranges), one line each naming the key, the value and the rule: a stated value that
        no run could have had would be a figure's false premise (a negative sequence length, negative tokens)."""
        problems = [f"{o} (--devices): must be >= 1" for o in self.overrides
                    if o.startswith("world_size=") and not o.partition("=")[2].isdigit() or o == "world_size=0"]
        if self.warmup_steps is not None and self.warmup_steps < 0:
            problems.append(f"benchmark.warmup_steps={self.warmup_steps} (--warmup-steps): must be >= 0")
        try:
            spec = build_spec(self.compose(self.config_overrides))
        except SpecError as exc:
            return problems + exc.problems
        except Exception as exc:  # noqa: BLE001 - Hydra's own: an unknown key, a wrong type, a missing group option
            return problems + [composition_error(exc)]
        stated = [o.partition("=")[0].lstrip("+~") for o in self.config_overrides]
        return problems + [p for p in check_choices(spec) + check_ranges(spec)  # the keys stated (not the defaults)
                           if any(f"{key}=" in p.partition(": ")[0] or f"{key}." in p.partition(": ")[0]
                                  for key in stated)]


def composition_error(exc: Exception) -> str:
    """Hydra's composition error on one line: its message and cause, the options it lists (no search path)."""
    texts = [str(exc)] + ([str(exc.__cause__)] if exc.__cause__ is not None else [])
    lines = [line.strip() for text in texts for line in text.split("Config search path")[0].splitlines()]
    return " ".join(line for line in lines if line and not line.startswith(("full_key", "object_type", "reference_type")))


def stated_spec(parsed: Parsed, meta: Meta, framework: Optional[str]) -> Stated:
    # analysis settings (benchmark, logging) from the defaults with the user's overrides: one composition
    st = Stated(meta.compose(meta.config_overrides), meta.compose)
    st.set("framework.name", framework, f"log format {parsed.format}")
    st.log_facts(parsed.facts)
    st.log_facts(printed_settings(parsed.steps))
    st.system(meta.system)
    st.overrides(meta.overrides)
    st.set("framework.name", "unknown", f"log format {parsed.format}")  # where nothing stated one
    resolve(st)
    marked = [s for s in parsed.steps if s["repeat"] == parsed.steps[0]["repeat"] and s["warmup"]] \
        if marks_warmup(parsed) and parsed.steps else None
    warmup = meta.warmup_steps if meta.warmup_steps is not None else (
        len(marked) if marked is not None else
        0 if parsed.format in NO_WARMUP_FORMATS else st.spec["benchmark"]["warmup_steps"])
    st.spec["benchmark"]["warmup_steps"] = warmup
    return st


def marks_warmup(parsed: Parsed) -> bool:
    """Whether the source marked each warm-up step itself (tprimat's own log, a tprimat run's W&B history)."""
    return parsed.format in STEP_WARMUP_FORMATS or bool(parsed.extra.get("warmup_marked"))


def printed_settings(steps: Sequence[dict]) -> dict:
    """``PRINTED_SETTINGS`` that every parsed step prints alike, as facts (``tprimat.logs.facts``)."""
    if not len(steps):
        return {}
    columns = Columns.of(steps)
    facts = {}
    for name, key in PRINTED_SETTINGS.items():
        values = set(columns.printed(name))
        value = values.pop() if len(values) == 1 else None
        if isinstance(value, (int, float)) and value > 0:
            value = int(value) if float(value).is_integer() else value
            facts[key] = (value, f"log: every step line prints {name.replace('_', ' ')} {value}")
    return facts


def token_disagreements(steps: Sequence[dict], spec: dict, where: dict) -> list[str]:
    """Where the tokens per step rest on a stated sequence length or batch size that the log contradicts: a
    printed ``actual seqlen`` other than the stated length (used per step instead), or an exact consumed-tokens
    count that grows by other than the tokens used."""
    columns = Columns.of(steps)
    out = []
    seq = spec["training"]["seq_length"]
    printed = sorted({v for v in columns.printed("actual_seqlen") if v and v > 0} - {seq})
    if seq and printed:
        shown = ", ".join(f"{v:g}" for v in printed[:5]) + (" ..." if len(printed) > 5 else "")
        out.append(f"training.seq_length={seq} ({where.get('training.seq_length')}) but the log prints actual seqlen "
                   f"{shown} (curriculum learning shortens sequences): the tokens per step use the printed length")
    consumed = columns.printed("consumed_tokens")
    if consumed.count(None) == len(consumed):
        return out
    numbers, tokens = columns.step, columns.tokens
    for i in range(1, len(numbers)):
        if None in (consumed[i], consumed[i - 1], tokens[i]) or numbers[i] <= numbers[i - 1]:
            continue
        grown = (consumed[i] - consumed[i - 1]) / (numbers[i] - numbers[i - 1])
        if grown > 0 and abs(tokens[i] / grown - 1) > AGREEMENT:
            out.append(f"tokens per step: {tokens[i]:,} used at step {numbers[i]} (batch size x sequence length), but "
                       f"the log's consumed tokens grow by {grown:,.0f} per step: a stated batch size or sequence "
                       "length is likely wrong")
            break
    return out


def complete_steps(steps: Sequence[dict], spec: dict, world: Optional[int], warnings: list[str],
                   marked: bool = False) -> Sequence[dict]:
    """The parsed steps completed in place into the result's steps (tokens, step time, warm-up). ``marked``:
    the log marked its warm-up steps itself (each repeat's own), kept as marked."""
    wanted = spec["benchmark"]["warmup_steps"]
    warmup = min(wanted, max(len(steps) - 1, 0))
    if warmup < wanted and not marked:
        warnings.append(f"only {len(steps)} steps: {warmup} of benchmark.warmup_steps={wanted} excluded as warm-up")
    gbs, seq = spec["training"]["global_batch_size"], spec["training"]["seq_length"]
    if not marked and complete_uniform(steps, gbs, seq, warmup):
        return steps
    steps = steps if isinstance(steps, list) else list(steps)  # held as columns: one dict per step, completed
    previous = None
    for i, s in enumerate(steps):
        complete_step(s, gbs, seq, world, previous, s["warmup"] if marked else i < warmup, warnings)
        previous = s
    return steps


def infer_convention(fmt: str, records: list[StepRecord], st: Stated, world: Optional[int]) -> dict:
    """Which FLOPs convention the framework's own TFLOP/s used: the candidate that reproduces it within 2%."""
    kept = Columns.of(records).kept()
    printed = kept.printed("tflops_per_gpu")
    times, tokens = kept.step_time_s, kept.tokens
    if not (all(printed) and all(times) and all(tokens)):  # else every step has a figure, a time and tokens
        paired = list(map(all, zip(printed, times, tokens)))
        if not any(paired):
            return {"reported_tflops_per_device": None, "reported_flops_convention": None}
        printed, times, tokens = (list(compress(column, paired)) for column in (printed, times, tokens))
    reported = median(printed)
    # the median commutes with a positive scale
    tokens_per_s = median_ratio(tokens, times)
    model, seq = model_conf(st), st.spec["training"]["seq_length"]
    convention = "unknown (the model, sequence length or world size is not stated)"
    if model and seq and world:
        convention = "unknown (does not match a known convention with the stated model and batch)"
        for candidate in CANDIDATES.get(fmt, ()):
            per_token = flops.flops_per_token(model, seq, candidate)
            predicted = per_token * tokens_per_s / (1e12 * world)
            if abs(predicted / reported - 1) < AGREEMENT:
                convention = candidate
                break
    return {"reported_tflops_per_device": reported, "reported_flops_convention": convention}


def disagreements(summary: dict) -> list[str]:
    """A computed headline figure that disagrees with the framework's own by more than 2%, with likely causes."""
    out = []
    for ours, theirs, cause in (("tokens_per_s_per_device", "tokens_per_s_per_gpu", "world size or tokens per step"),
                                ("tflops_per_device", "tflops_per_gpu", "FLOPs convention, model or world size")):
        mine, printed = summary.get(ours), summary["reported"].get(theirs)
        if summary["provenance"].get(ours) == "computed" or summary["provenance"].get(ours) == "measured":
            if mine and printed and abs(mine / printed - 1) > AGREEMENT:
                out.append(f"{ours}: computed {mine:,.4g} but the framework printed {printed:,.4g} "
                           f"({mine / printed - 1:+.1%}); likely cause: {cause}")
    return out


def ingest_parsed(parsed: Parsed, name: str, meta: Meta, sha256: str) -> dict:
    st = stated_spec(parsed, meta, FRAMEWORK_OF.get(parsed.format))
    framework = st.spec["framework"]["name"]  # tprimat's own log states its framework
    world = world_size(st)
    marked = marks_warmup(parsed) and meta.warmup_steps is None
    steps = complete_steps(parsed.steps, st.spec, world, st.warnings, marked)
    st.warnings.extend(token_disagreements(steps, st.spec, st.where))
    plan = plan_of(st, framework, f"ingested {parsed.format} log {name}")
    # parsed steps (as columns, or dicts) read as records themselves; steps from other sources (TensorBoard, W&B)
    # become records
    records = steps if isinstance(steps, StepColumns) or set(map(type, steps)) <= {Step} else [as_record(s) for s in steps]
    summary = summarize(records, plan["world_size"], plan["flops_per_token"], plan["peak_tflops"], timing="reported")
    if summary is not None:
        summary.update(infer_convention(parsed.format, records, st, plan["world_size"]))
        st.warnings.extend(disagreements(summary))
    del records
    status = "failed" if parsed.error else "ok"
    if status == "ok" and (summary is None or summary["tokens_per_s_per_device"] is None):
        st.warnings.append("no throughput: the log and the overrides do not state the tokens per step and the "
                           "world size (pass training.seq_length, training.global_batch_size, --devices or --system)")
    if parsed.extra.get("unparsed_lines"):
        st.warnings.append(unread_warning(parsed.extra["unparsed_lines"], len(steps), parsed.extra["unparsed_examples"]))
    source = {"kind": "ingested", "format": parsed.format, "file": name, "sha256": sha256,
              "stated": dict(sorted(st.where.items())), "facts": {k: v for k, v in st.facts.items()}, **parsed.extra}
    return make_result(run_id=new_run_id(), status=status, error=parsed.error, spec=st.spec, plan=plan,
                       environment=None, steps=steps, summary=summary, warnings=st.warnings,
                       framework={"name": framework, "version": None}, overrides=meta.overrides, source=source)


def unread_warning(unread: int, steps: int, examples: list[str]) -> str:
    return (f"{unread} of {unread + steps} lines recognised as step lines could not be read and were left out "
            f"(source.unparsed_lines); the first: {examples[0]!r}")


def ingest_text(raw: str, name: str, meta: Meta, fmt: str = "auto") -> dict:
    parsed = parse_lines(raw.splitlines(), detect(raw) if fmt == "auto" else fmt)
    return ingest_parsed(parsed, name, meta, hashlib.sha256(raw.encode("utf-8", "replace")).hexdigest())


def read_system(path: Optional[str]) -> Optional[dict]:
    return json.loads(Path(path).read_text()) if path else None


def ingest_file(path: Path, meta: Meta, fmt: str = "auto") -> dict:
    path = Path(path)
    if fmt == "tensorboard" or (fmt == "auto" and path.name.startswith("events.out.tfevents")):
        from tprimat.ingest.sources import steps_from_scalars, tensorboard_scalars

        return ingest_steps(steps_from_scalars(tensorboard_scalars(path)), "tensorboard", path, meta)
    if fmt == "wandb" or (fmt == "auto" and path.suffix == ".wandb"):
        from tprimat.ingest.sources import wandb_run

        return ingest_parsed(wandb_run(path), path.name, meta, sha256_of(path))
    return ingest_log(path, meta, fmt)


def ingest_log(path: Path, meta: Meta, fmt: str = "auto") -> dict:
    """A text log, streamed line by line (the format detected from its head): memory stays bounded by the
    records, not the file."""
    encoding = encoding_of(path)
    with open(path, encoding=encoding, errors="replace") as f:
        chosen = detect(f.read(DETECT_BYTES)) if fmt == "auto" else fmt
    with paused_gc():
        parsed = parse_file(path, chosen, encoding)
        return ingest_parsed(parsed, path.name, meta, parsed.sha256 or sha256_of(path))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))  # UTF-32 LE first: it starts like UTF-16 LE


def encoding_of(path: Path) -> str:
    """The text encoding a byte-order mark names (a log saved by Windows tools, PowerShell's UTF-16), else UTF-8."""
    with open(path, "rb") as f:
        head = f.read(4)
    return next((name for bom, name in BOMS if head.startswith(bom)), "utf-8")


@contextlib.contextmanager
def paused_gc():
    """The cyclic garbage collector paused while a long log becomes records: the parse allocates millions of
    small acyclic dicts and floats, and each collection walks all of them again (3-5x slower records)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def ingest_steps(steps: list[dict], fmt: str, path: Path, meta: Meta) -> dict:
    error = None if steps else f"no training scalars found in {path.name}"
    parsed = Parsed(fmt, steps, error)
    return ingest_parsed(parsed, path.name, meta, sha256_of(Path(path)))


WANDB_OWN_LOGS = ("debug.log", "debug-internal.log", "debug-core.log")


def wandb_own_log(path: Path) -> bool:
    """W&B's own debug logs (``wandb/.../debug*.log``) beside a run's ``.wandb`` file: never a training log."""
    return path.name in WANDB_OWN_LOGS and "wandb" in path.parts[:-1]


def find_runs(paths: list[str]) -> list[Path]:
    """One entry per run: each log file, each TensorBoard event file, each W&B offline run file."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and not wandb_own_log(p) and (
                p.suffix in (".log", ".txt", ".out", ".err", ".wandb") or p.name.startswith("events.out.tfevents")))
        elif path.exists():
            found.append(path)
    return found
