"""The hostile battery: what tprimat reads but did not write, mutated with a seed, must never crash it, hang it or
make it write a result its own check rejects.

- Logs: real logs of the shared corpus (``--logs``), each mutated 1-5 times (numbers replaced by extreme or
  negative values, characters deleted or replaced by control bytes, lines duplicated, swapped, truncated, a
  100,000-character line, deeply nested MLLOG JSON), ingested in this process under a 10 s alarm; the result must
  pass the result schema (``tprimat check``'s validation).
- Results: a real result (a CPU run made here) with one field mutated (null, removed, another type, beyond float
  range, zero, negative), compared in batches with ``--out`` beside an untouched one.
- Overrides: hostile command-line values (wrong types, unknown keys, integers beyond 64 bits, nan, broken
  interpolations, huge strings) composed, built and validated as ``launch.py`` does: each must be refused with a
  message (or accepted), never raise anything else.

Last line: ``hostile_failures=<n>`` (crashes, hangs over 10 s, results check rejects).

    python bench/fuzz.py [--seed 0] [--logs ../shared/logs] [--mutated-logs 3000] [--mutated-results 500]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import signal
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tprimat.compose import compose  # noqa: E402
from tprimat.ingest.build import Meta, ingest_file  # noqa: E402
from tprimat.results.result import validate_result  # noqa: E402

HANG_S = 10
EXTREMES = ["9" * 400, "-13", "0", "nan", "inf", "-inf", "1e999", "-0", "1e-320", "18446744073709551617", "-1"]


class Hang(Exception):
    pass


def alarm(_signum, _frame):
    raise Hang()


def mutate_log(text: str, rng: random.Random) -> str:
    lines = text.splitlines(keepends=True) or [""]
    for _ in range(rng.randint(1, 5)):
        kind = rng.randrange(8)
        i = rng.randrange(len(lines))
        line = lines[i]
        if kind == 0:  # a number replaced by an extreme
            digits = [k for k, c in enumerate(line) if c.isdigit()]
            if digits:
                k = rng.choice(digits)
                j = k
                while j < len(line) and (line[j].isdigit() or line[j] in ".eE+-"):
                    j += 1
                lines[i] = line[:k] + rng.choice(EXTREMES) + line[j:]
        elif kind == 1 and line:  # a character deleted
            k = rng.randrange(len(line))
            lines[i] = line[:k] + line[k + 1:]
        elif kind == 2 and line:  # a character replaced by a control byte or a wide character
            k = rng.randrange(len(line))
            lines[i] = line[:k] + rng.choice(["\x00", "\x1b", "\r", "\u2028", "\ufffd", "|", "/", ":"]) + line[k + 1:]
        elif kind == 3:  # a line duplicated
            lines.insert(i, line)
        elif kind == 4:  # two lines swapped
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == 5:  # truncated here
            lines = lines[:i + 1]
            lines[-1] = lines[-1][:rng.randrange(len(lines[-1]) + 1)]
        elif kind == 6:  # a very long line
            lines.insert(i, line.rstrip("\n") * max(1, 100_000 // max(1, len(line))) + "\n")
        else:  # deeply nested JSON after an MLLOG marker
            lines.insert(i, ":::MLLOG " + "[" * 100_000 + "\n")
    return "".join(lines)


def run_logs(logs: Path, count: int, rng: random.Random, work: Path) -> list[str]:
    sources = sorted(logs.glob("*.log"))
    if not sources:
        print(f"no corpus logs under {logs}: the log battery is skipped")
        return []
    failures = []
    meta = Meta(compose)
    for n in range(count):
        source = rng.choice(sources)
        path = work / f"{n}_{source.name}"
        path.write_text(mutate_log(source.read_text(errors="replace"), rng), errors="replace")
        signal.alarm(HANG_S)
        try:
            result = ingest_file(path, meta)
            problems = validate_result(result)
            if problems:
                failures.append(f"log {path.name}: check rejects the result: {problems[0]}")
        except Hang:
            failures.append(f"log {path.name}: ingest ran over {HANG_S} s")
        except Exception as exc:  # noqa: BLE001 - every exception here is a failure to report
            failures.append(f"log {path.name}: {type(exc).__name__}: {str(exc)[:200]}")
        finally:
            signal.alarm(0)
            path.unlink()
    return failures


def leaves(node, path=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield path + (key,)
            yield from leaves(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node[:3]):
            yield path + (i,)
            yield from leaves(value, path + (i,))


HOSTILE_VALUES = [None, 10 ** 400, -1, 0, 1e308, -1e308, "x", [], {}, True, 1.5, "REMOVE"]


def mutated(result: dict, path: tuple, value) -> dict:
    """A copy of ``result`` with the field at ``path`` set to ``value`` ("REMOVE": deleted, or nulled in a list)."""
    out = copy.deepcopy(result)
    node = out
    for part in path[:-1]:
        node = node[part]
    if value == "REMOVE" and isinstance(node, dict):
        del node[path[-1]]
    else:
        node[path[-1]] = None if value == "REMOVE" else value
    return out


def mutate_result(result: dict, rng: random.Random) -> dict:
    return mutated(result, rng.choice(sorted(set(leaves(result)), key=str)), rng.choice(HOSTILE_VALUES))


def run_results(count: int, rng: random.Random, work: Path) -> list[str]:
    from tprimat.compare.cli import add_arguments, run
    from tprimat.execute.run import execute

    real = execute(compose(["training.max_steps=6", "benchmark.warmup_steps=1", "logging.wandb.mode=disabled",
                            "platform=cpu", "training.precision=fp32"]), work / "real", []).result
    failures, batch = [], 10
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for b in range(0, count, batch):
        root = work / f"results_{b}"
        (root / "good").mkdir(parents=True)
        (root / "good" / "result.json").write_text(json.dumps(real))
        for k in range(min(batch, count - b)):
            (root / f"bad{k}").mkdir()
            (root / f"bad{k}" / "result.json").write_text(json.dumps(mutate_result(real, rng)))
        signal.alarm(HANG_S * 6)
        try:
            run(parser.parse_args([str(root), "--out", str(root / "report")]))
        except Hang:
            failures.append(f"results batch {b}: compare ran over {HANG_S * 6} s")
        except Exception as exc:  # noqa: BLE001
            failures.append(f"results batch {b}: {type(exc).__name__}: {str(exc)[:200]} "
                            f"({traceback.extract_tb(exc.__traceback__)[-1].name})")
        finally:
            signal.alarm(0)
    return failures


BAD_OVERRIDES = [
    "training.max_steps=abc", "training.max_steps=-1", "training.max_steps=0", "training.max_steps=1.5",
    "training.max_steps=99999999999999999999", "training.max_steps=nan", "training.optimizer.lr=nan",
    "training.optimizer.lr=inf", "training.optimizer.lr=-1", "training.optimizer.lr=0", "training.optimizer.eps=0",
    "training.global_batch_size=0", "training.global_batch_size=-8", "training.micro_batch_size=1000000",
    "training.seq_length=0", "training.seq_length=10000000", "training.precision=fp64", "training.precision=",
    "training.precision=null", "training.activation_checkpointing=sometimes", "training.ac_frequency=0",
    "training.ac_frequency=1/0", "training.ac_frequency=abc", "training.compile=maybe", "training.compile_mode=fast",
    "training.fp8.recipe=magic", "training.seed=-1", "parallelism.tp=0", "parallelism.tp=-2", "parallelism.tp=3",
    "parallelism.pp=0", "parallelism.cp=0", "parallelism.dp=0", "parallelism.vp=0", "parallelism.vp=3",
    "parallelism.zero_stage=7", "parallelism.pp_schedule=zigzag", "parallelism.fsdp=2", "platform.name=tpu",
    "platform.gpu=h999", "platform.devices_per_node=0", "platform.devices_per_node=-1", "platform.nodes=0",
    "platform.price_per_device_hour_usd=-1", "platform.price_per_device_hour_usd=nan", "model.num_layers=0",
    "model.hidden_size=7", "model.hidden_size=1048576", "model.num_attention_heads=0", "model.num_kv_heads=3",
    "model.vocab_size=0", "model.head_dim=0", "model.rope_theta=0", "model.rope_theta=-1", "model.norm=batchnorm",
    "model.mlp=relu", "model.family=gpt5", "framework.name=jax", "framework.timeout_min=0", "framework.timeout_min=-5",
    "framework.flavour=nemo9", "methodology.name=fastest", "benchmark.warmup_steps=-1", "benchmark.repeats=0",
    "benchmark.telemetry_interval_s=0", "benchmark.preflight_file=/nonexistent.json", "logging.wandb.mode=loud",
    "logging.log_every_steps=0", "profile.enabled=true", "profile.steps=[5]", "profile.ranks=[99]",
    "profile.tool=perf", "dry_run=maybe", "run_name=" + "x" * 10_000, "unknown.key=1", "training.unknown=1",
    "model.unknown=1", "run_name=${foo", "run_name=${foo.bar}", "run_name=${oc.env:TPRIMAT_UNSET_VARIABLE}",
    "training.max_steps=${training.global_batch_size}", "training.precision=${oc.env:TPRIMAT_UNSET_VARIABLE}",
    "model.name=日本語", "run_name=\x00", "training.optimizer.beta1=1", "training.optimizer.beta2=-0.1",
    "training.optimizer.min_lr=1", "training.optimizer.warmup_steps=-1", "training.optimizer.grad_clip=-1",
    "training.optimizer.weight_decay=-1", "training.optimizer.name=sgd", "training.grad_reduce_in_fp32=false",
    "model=nonexistent", "platform=nonexistent", "framework=nonexistent", "training=nonexistent",
    "experiment=nonexistent", "parallelism.sequence_parallel=true", "model.max_position_embeddings=1",
    "model.vocab_pad_multiple=0", "training.max_steps=[1,2]", "training.max_steps={a: 1}",
]


def run_overrides() -> list[str]:
    from tprimat.measure.devices import detect
    from tprimat.spec.build import SpecError, build_spec
    from tprimat.spec.validate import validate

    hw, failures = detect(), []
    refusals = (SpecError, KeyError)
    for override in BAD_OVERRIDES:
        key = override.partition("=")[0].lstrip("+~")[:60]
        try:
            plain = compose([override, "dry_run=true"])
            said = " ".join(validate(build_spec(plain, hw), hw, dry_run=True))
        except refusals as exc:
            said = str(exc)
        except Exception as exc:  # noqa: BLE001 - Hydra and OmegaConf refuse with their own errors, by the key
            name = type(exc).__module__ + "." + type(exc).__name__
            if not name.startswith(("hydra.", "omegaconf.")):
                failures.append(f"override {override[:60]!r}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            said = str(exc)
        if said and key not in said.replace("/", "."):  # a refusal names the key typed (Hydra: 'model/nope')
            failures.append(f"override {override[:60]!r}: refused without naming {key}: {said[:200]}")
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logs", default=str(ROOT.parent / "shared" / "logs"))
    parser.add_argument("--mutated-logs", type=int, default=3000)
    parser.add_argument("--mutated-results", type=int, default=500)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    signal.signal(signal.SIGALRM, alarm)
    with tempfile.TemporaryDirectory(prefix="tprimat_fuzz_") as tmp:
        work = Path(tmp)
        failures = run_logs(Path(args.logs), args.mutated_logs, rng, work)
        print(f"logs: {args.mutated_logs} mutated, {len(failures)} failures")
        result_failures = run_results(args.mutated_results, rng, work)
        print(f"results: {args.mutated_results} mutated, {len(result_failures)} failures")
        override_failures = run_overrides()
        print(f"overrides: {len(BAD_OVERRIDES)} hostile, {len(override_failures)} failures")
    everything = failures + result_failures + override_failures
    for line in everything[:40]:
        print(f"  {line}")
    print(f"hostile_failures={len(everything)}")


if __name__ == "__main__":
    main()
