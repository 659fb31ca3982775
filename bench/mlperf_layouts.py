"""MLPerf Training LLM submissions: the parallel layout each system ran with and the throughput it measured.

Reads results repositories (bare git mirrors of mlcommons/training_results_v5.1, _v5.0, _v4.1, _v4.0, through
``git ls-tree``/``git cat-file``; nothing is checked out) and writes one row per system-benchmark to
``mlperf_rows_v51.json``, ``mlperf_rows_v50.json`` (and ``_v41``, ``_v40``), sorted by (benchmark, submitter,
system), for each round given:

    python bench/mlperf_layouts.py --v51 <v5.1 git dir> --v50 <v5.0 git dir> [--v41 DIR] [--v40 DIR] [--out DIR]

Rows: v5.1 ``llama31_8b`` and ``llama2_70b_lora`` (and its ``llama31_405b`` in ``mlperf_rows_v51_405b.json``, held out
from the development rows); v5.0 ``llama2_70b_lora``, ``llama31_405b`` and ``gpt3``; v4.1
and v4.0 ``llama2_70b_lora`` and ``gpt3``
(every ``<Submitter>/results/<system>/<benchmark>/`` holding ``result_*.txt``). A log or file whose blob the
mirror lacks is skipped and named in the row (``missing_logs``).

Matching a system to the ``config_*.sh`` it ran with
-----------------------------------------------------
Candidates: every ``config_*.sh`` under ``<Submitter>/benchmarks/<benchmark>/`` whose name says neither
``common`` nor ``mounts``. Each is read as bash would (``export``/plain assignments, ``${X:-d}``, ``: "${X:=d}"``,
``$((...))``, ``source``/``.`` of files beside it, or else of the file of that name at the top of the same
implementation folder; ``if``..``fi`` blocks are skipped: they only switch debug, checkpoint or mount options).
Unset variables take the default of the implementation's Hydra yaml (``key: ${oc.decode:${oc.env:VAR,default}}``;
the yaml files under the config's folder, or the folder above a ``configs/`` folder, vendored trees excepted),
and the yaml's own ``model.global_batch_size`` expression is evaluated (``multiply``/``floor_div``/...), so GBS is
computed the way that implementation computes it. Without a yaml: the variables TP/PP/CP/VP/MBS/GBS (or the
NVIDIA names) and GBS = MINIBS * world / (TP*PP*CP). Where a sourced file is absent, what it may have set is
unknown: no yaml default stands in for it (except PP, taken as 1 and listed in ``defaults_used``).

A candidate is kept only if every check that both sides can answer passes:
  - nodes and GPUs per node (systems JSON) = DGXNNODES/DGXNGPU (or NNODES/GPUS_PER_NODE, else the name's NxG);
  - AMD (MI3xxX) against NVIDIA: a platform in the config's name must be of the system's vendor;
  - the log's global_batch_size = the config's GBS; gradient_accumulation_steps = GBS / (MBS * dp);
  - LR (or MAX_LR), MAX_STEPS and WARMUP_STEPS, where the config sets them, = the log's opt_base_learning_rate,
    opt_learning_rate_training_steps / max_steps and opt_learning_rate_warmup_steps;
  - the log's max_sequence_length = the config's sequence length; lora_rank = LORA_DIM/LORA_R where set;
  - TP/PP/CP that the log itself prints (NeMo's "All tensor model parallel group ranks: [[...]]" lines).
If several survive, preferences narrow them, in order, each only where some survivor has it: the config the log
names (``:::DLPAL ... <DGXSYSTEM>`` = the config's name), a config in a folder named after the system
(``implementations/<system>`` or ``configs/<system>``, or a folder name the system name starts with), a config
whose name contains the system's name, a platform in the name that is the system's accelerator (GB200, GB300,
B200, B300, H100, H200, MI3xxX; NVIDIA's recipes reuse DGXB200 names on B300 and DGXH100 on H200, so this is
a preference, never a filter). The GBS check must have been made: a config whose GBS cannot be computed fails.
One left: ``config`` is it (``unique``; ``unique but unverified`` where the system has no readable log). Several:
``config`` is null, ``config_candidates`` lists them and the layout fields are filled only where all of them
agree (``layout_from: "config candidates (all agree)"``). None: ``config`` is null and tp/pp/cp come from the
log's own group lines where it prints them (``layout_from: "log"``), else stay null. ``match`` says which checks
and preferences decided (and in what the passing candidates differed), or why the nearest candidates failed.

``defaults_used`` lists the fields taken from a yaml default (or, for precision, from the training code)
rather than set by the config. ``vp`` as configured: null or 1 both mean no interleaved pipeline. Precision:
``fp4`` where FP4 is on, else ``fp8`` where FP8 is on, else ``bf16`` where FP8 is off; where neither config nor
yaml says, training code that hard-codes ``fp8="hybrid"`` counts as fp8. ``precision_from`` gives the flags and
recipe, and llama2_70b_lora's NVFP4 "healing" switch (HEALING_ITER: the last steps run in HEALING_PRECISION).
Recompute: ``recompute`` (full | selective | null), ``recompute_method`` (uniform | block) and
``recompute_num_layers`` as NeMo's ``activations_checkpoint_*`` (ACG/ACM/ACL) or Megatron's ``recompute_*`` set them
(AMD's MI300X LoRA configs: full, block, 21 of 80 layers). The held-out v5.0, v4.1 and v4.0 files were committed
alone (a9159d6, 897bcd5) and scored once without these fields; re-extracted on 2026-11-29 with them (nothing else in
them changed), their later figures are re-scores, not held-out ones.
Pipeline split: ``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split`` as the config
sets NeMo's ``model.account_for_*`` (ASYM_PP_EMBED / ASYM_PP_LOSS: every v5.0 Llama 3.1 405B config, 126 layers over
PP 8 x VP 8); false where unset. Added on 2026-11-29 (evening) by re-extracting every round (nothing else changed).
FP8: ``fp8_recipe`` (FP8_RECIPE as the config or its yaml sets it; null where neither does, or where a sourced file
is absent and might have) and ``fp8_attention`` (FP8_DPA: attention in FP8 as well; null where a sourced file is
absent), each where the matching configs agree. Added on 2026-11-29 (late) by
re-extracting every round (nothing else changed).
Context parallelism: ``cp_comm_type`` (CP_COMM_TYPE or the yaml's model.cp_comm_type: p2p, a2a, ...; p2p where
the implementation's yaml leaves it unset; where a sourced file is absent, the submission has no yaml or no config
matched, the value NeMo's printed model config in the log states (``cp_comm_type: a2a``), else null). Added on
2026-11-29 (night) by re-extracting every round (nothing else changed).

Throughput
----------
Per run (``result_*.txt``), from its ``:::MLLOG`` ``tracked_stats`` records during training (validation_*
keys, eval and init/warm-up records are ignored), the first kind the log has of:
  1. block throughput: ``{"throughput": x, ...}``, samples/s of the whole system over one training block
     (block_start..block_stop, between evals; AMD's callbacks, NVIDIA's v5.0 logging);
  2. block step times: ``{"train_step_time": t}`` without a loss (mlperf_common's mean over the block): GBS / t;
  3. per-interval step times ``{"train_step_time": t, "reduced_train_loss": ...}`` (metadata.step), only where
     a log has no block record (NVIDIA's v5.0 405b on GB200): GBS / t.
Block records are wall-clock means; the median of per-step times runs 0.3-5% higher than them (step times are
skewed by slow steps), hence the order. The run's figure is the median of its samples/s; the row's
``tokens_per_s_per_device`` is the median of the runs' figures, times seq_length (the log's max_sequence_length,
else 8192: llama2_70b_lora's fixed packed length), divided by the system's accelerators. ``throughput_from``
names the records and how many runs used each kind. ``tprimat ingest`` reads the same block records.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
from pathlib import Path

BENCHMARKS = {"v5.1": ("llama31_8b", "llama2_70b_lora"), "v5.0": ("llama2_70b_lora", "llama31_405b", "gpt3"),
              "v4.1": ("llama2_70b_lora", "gpt3"), "v4.0": ("llama2_70b_lora", "gpt3")}
OUT_NAMES = {"v5.1": "mlperf_rows_v51.json", "v5.0": "mlperf_rows_v50.json", "v4.1": "mlperf_rows_v41.json",
             "v4.0": "mlperf_rows_v40.json"}
# benchmarks of a round kept in a file of their own: held out from the round's development rows
HELD_OUT_SPLITS = {"v5.1": (("llama31_405b",), "mlperf_rows_v51_405b.json")}
BENCH_SEQ = {"llama2_70b_lora": 8192}  # the benchmark's fixed packed length where a log states none
VENDORED = {"NeMo", "Megatron-LM", "TransformerEngine", "apex", "nccl", "tp_overlap", "data_prefix", "3rdparty",
            "tests", "examples", "docs", "implementations"}
# yaml key -> row field; ALIASES: the variables that set a field where no yaml maps it
YAML_KEYS = {"tp": "model.tensor_model_parallel_size", "pp": "model.pipeline_model_parallel_size",
             "cp": "model.context_parallel_size", "vp": "model.virtual_pipeline_model_parallel_size",
             "mbs": "model.micro_batch_size", "gbs": "model.global_batch_size", "nodes": "trainer.num_nodes",
             "gpus": "trainer.devices", "fp8": "model.fp8", "fp4": "model.fp4", "fp8_recipe": "model.fp8_recipe",
             "fp4_recipe": "model.fp4_recipe", "seq": "model.encoder_seq_length",
             "acg": "model.activations_checkpoint_granularity", "acm": "model.activations_checkpoint_method",
             "acl": "model.activations_checkpoint_num_layers",
             "split_embedding": "model.account_for_embedding_in_pipeline_split",
             "split_loss": "model.account_for_loss_in_pipeline_split",
             "fp8_dpa": "model.fp8_dot_product_attention", "cp_comm": "model.cp_comm_type"}
ALIASES = {"tp": ("TP", "TENSOR_MODEL_PARALLEL"), "pp": ("PP", "PIPELINE_MODEL_PARALLEL"),
           "cp": ("CP", "CONTEXT_PARALLEL"), "vp": ("VP", "INTERLEAVED_PIPELINE"), "mbs": ("MBS", "MICRO_BATCH_SIZE"),
           "gbs": ("GBS",), "nodes": ("DGXNNODES", "NNODES"), "gpus": ("DGXNGPU", "GPUS_PER_NODE"),
           "fp8": ("FP8",), "fp4": ("FP4",), "fp8_recipe": ("FP8_RECIPE",), "fp4_recipe": ("FP4_RECIPE",),
           "seq": ("MAX_SEQLEN", "SEQ_LEN", "SEQ_LENGTH"), "acg": ("ACG", "RECOMPUTE_GRANULARITY"),
           "acm": ("ACM", "RECOMPUTE_METHOD"), "acl": ("ACL", "RECOMPUTE_NUM_LAYERS"),
           "split_embedding": ("ASYM_PP_EMBED",), "split_loss": ("ASYM_PP_LOSS",), "fp8_dpa": ("FP8_DPA",),
           "cp_comm": ("CP_COMM_TYPE",)}
LOG_CHECKS = (("lr", ("LR", "MAX_LR"), ("opt_base_learning_rate",)),
              ("max_steps", ("MAX_STEPS",), ("opt_learning_rate_training_steps", "max_steps")),
              ("warmup_steps", ("WARMUP_STEPS",), ("opt_learning_rate_warmup_steps",)),
              ("lora_rank", ("LORA_DIM", "LORA_R"), ("lora_rank",)))
PLATFORMS = ("GB200", "GB300", "B200", "B300", "H100", "H200", "MI300X", "MI325X", "MI350X", "MI355X")
GROUPS = {"tp": "tensor model parallel", "pp": "pipeline model parallel", "cp": "context parallel"}
CP_COMM_PRINTED = re.compile(r"^\s*(?:\d+:\s*)?cp_comm_type: ([a-z0-9+_]+)\s*$")


# ---------------------------------------------------------------- git
class Repo:
    def __init__(self, git_dir: str):
        self.commit = subprocess.run(["git", "-C", git_dir, "rev-parse", "HEAD"], capture_output=True, text=True,
                                     check=True).stdout.strip()
        out = subprocess.run(["git", "-C", git_dir, "ls-tree", "-r", "--name-only", "-z", self.commit],
                             capture_output=True, check=True).stdout.decode()
        self.files = sorted(f for f in out.split("\0") if f)
        self.known = set(self.files)
        self.cat = subprocess.Popen(["git", "-C", git_dir, "cat-file", "--batch"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE)
        self.cache: dict[str, str | None] = {}

    def read(self, path: str, keep: bool = True) -> str | None:
        """The file's text, or None where the tree lacks it or the mirror lacks its blob (kept if keep)."""
        if path in self.cache:
            return self.cache[path]
        self.cat.stdin.write(f"{self.commit}:{path}\n".encode())
        self.cat.stdin.flush()
        head = self.cat.stdout.readline().decode().split()
        text = None
        if head[-1] != "missing":
            text = self.cat.stdout.read(int(head[2])).decode("utf-8", "replace")
            self.cat.stdout.read(1)
        if keep:
            self.cache[path] = text
        return text


# ---------------------------------------------------------------- bash configs
def expand(text: str, env: dict) -> str | None:
    """Bash parameter and arithmetic expansion of an assignment's value; None where it needs a command."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        if text[0] == "'":
            return text[1:-1]
        text = text[1:-1]
    if "$(" in text.replace("$((", ""):
        return None

    def param(m):
        name, op, default = m.group(1) or m.group(4), m.group(2), m.group(3)
        if name not in env and op in (":-", ":="):
            if op == ":=":
                env[name] = default
            return default
        return env.get(name, "")
    text = re.sub(r"\$\{(\w+)(?:(:[-=])([^}]*))?\}|\$(\w+)", param, text)
    while (m := re.search(r"\$\(\(([^()]*(?:\([^()]*\)[^()]*)*)\)\)", text)):
        expr = re.sub(r"[A-Za-z_]\w*", lambda v: env.get(v.group(0), "0"), m.group(1))
        if not re.fullmatch(r"[\d\s+\-*/%()]*", expr):
            return None
        text = text[:m.start()] + str(eval(expr.replace("/", "//"))) + text[m.end():]  # digits and operators only
    return text


def run_config(repo: Repo, path: str, env: dict, read: list[str], missing: list[str], depth: int = 0) -> None:
    """Executes a config file's assignments into env, following source/. of files beside it (or, where the
    file is not beside it, of the file of that name at the top of its implementation folder)."""
    if path not in repo.known and read:
        home = config_home(read[0])
        if f"{home}/{path.rsplit('/', 1)[-1]}" in repo.known:
            path = f"{home}/{path.rsplit('/', 1)[-1]}"
    text = repo.read(path)
    if text is None:
        missing.append(path)
        return
    read.append(path)
    folder = path.rsplit("/", 1)[0]
    block = 0
    for line in text.replace("\\\n", " ").splitlines():
        line = line.split(" #")[0].strip()
        word = line.split(" ", 1)[0].rstrip(";")
        if word in ("if", "case", "for", "while", "until"):
            block += 1
        elif word in ("fi", "esac", "done"):
            block = max(block - 1, 0)
        if block or word in ("fi", "esac", "done") or not line or line.startswith("#"):
            continue
        for part in re.split(r"\s*(?:&&|;)\s*", line):
            m = re.fullmatch(r"(?:source|\.)\s+(.+)", part)
            if m and depth < 8:
                target = re.sub(r'"?\$\(dirname\s+"?\$\{BASH_SOURCE\[0\]\}"?\)"?/?', "", m.group(1)).strip('"')
                target = re.sub(r"^\./", "", target)
                run_config(repo, f"{folder}/{target}", env, read, missing, depth + 1)
                continue
            m = re.fullmatch(r':\s+"?\$\{(\w+):=([^}]*)\}"?', part)
            if m:
                env.setdefault(m.group(1), m.group(2))
                continue
            m = re.fullmatch(r"unset\s+([\w ]+)", part)
            if m:
                for name in m.group(1).split():
                    env.pop(name, None)
                continue
            m = re.fullmatch(r"(?:export\s+)?(\w+)(\+?)=(.*)", part)
            if m:
                value = expand(m.group(3), env)
                env[m.group(1)] = (env.get(m.group(1), "") + value) if m.group(2) and value is not None else value


# ---------------------------------------------------------------- Hydra yaml
def flatten_yaml(text: str) -> dict:
    """dotted key -> raw scalar text of a yaml mapping (lists and block scalars ignored)."""
    out, stack = {}, []
    for line in text.splitlines():
        m = re.match(r"^(\s*)([A-Za-z_][\w-]*):\s*(.*?)\s*$", line)
        if not m or line.lstrip().startswith("#"):
            continue
        indent, key, value = len(m.group(1)), m.group(2), re.sub(r"\s+#.*$", "", m.group(3))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([k for _, k in stack] + [key])
        if value:
            out.setdefault(dotted, value.strip("'\"") if not value.startswith("${") else value)
        else:
            stack.append((indent, key))
    return out


def decode(text):
    if not isinstance(text, str):
        return text
    t = text.strip().strip("'\"")
    if t.lower() in ("null", "none", "~", ""):
        return None
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    try:
        return int(t)
    except ValueError:
        try:
            return float(t)
        except ValueError:
            return t


class Resolver:
    """Evaluates OmegaConf interpolations of a flattened yaml against a config's environment."""
    OPS = {"multiply": lambda a, b: a * b, "floor_div": lambda a, b: a // b, "add": lambda a, b: a + b,
           "ceil_div": lambda a, b: -(-a // b)}

    def __init__(self, yaml: dict, env: dict):
        self.yaml, self.env, self.defaults = yaml, env, set()

    def value(self, key: str):
        raw = self.yaml.get(key)
        return None if raw is None else self.text(raw)

    def text(self, s: str):
        parts, i = [], 0
        while i < len(s):
            if s.startswith("${", i):
                v, i = self.interp(s, i + 2)
                parts.append(v)
            else:
                j = s.find("${", i)
                j = len(s) if j < 0 else j
                parts.append(s[i:j])
                i = j
        if len(parts) == 1 and not isinstance(parts[0], str):
            return parts[0]
        return decode("".join("" if p is None else str(p) for p in parts))

    def interp(self, s: str, i: int):
        """Reads one ${...} starting after '${'; returns (value, index after '}')."""
        j = i
        while s[j] not in ":}":
            j += 1
        name = s[i:j]
        if s[j] == "}":
            return self.value(name), j + 1
        args, depth, start, k = [], 0, j + 1, j + 1
        while True:
            c = s[k]
            if s.startswith("${", k):
                depth, k = depth + 1, k + 2
                continue
            if c == "}" and depth:
                depth -= 1
            elif c == "," and not depth:
                args.append(s[start:k])
                start = k + 1
            elif c == "}":
                args.append(s[start:k])
                break
            k += 1
        if name == "oc.env":
            var = args[0].strip()
            if var in self.env and self.env[var] is not None:
                return self.env[var], k + 1
            self.defaults.add(var)
            return (self.text(",".join(args[1:])) if len(args) > 1 else None), k + 1
        values = [self.text(a.strip()) for a in args]
        if name == "oc.decode":
            return decode(values[0]), k + 1
        if name not in self.OPS or any(v is None for v in values):
            raise ValueError(f"cannot evaluate ${{{name}:...}}")
        return self.OPS[name](*values), k + 1


# ---------------------------------------------------------------- one config
def truthy(v):
    if isinstance(v, bool) or v is None:
        return v
    s = str(v).strip().lower()
    return True if s in ("1", "true", "yes", "on") else False if s in ("0", "false", "no", "off", "") else None


def as_int(v):
    v = decode(v) if isinstance(v, str) else v
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer() else None


def config_home(path: str) -> str:
    parts = path.split("/")[:-1]
    if parts[-1] == "configs":
        return "/".join(parts[:-1])
    if len(parts) > 1 and parts[-2] == "configs":
        return "/".join(parts[:-2])
    return "/".join(parts)


def impl_files(repo: Repo, home: str, suffixes: tuple, max_depth: int) -> list[str]:
    found = []
    for f in repo.files:
        if f.startswith(home + "/") and f.endswith(suffixes):
            rel = f[len(home) + 1:].split("/")
            if len(rel) <= max_depth and not VENDORED & set(rel[:-1]):
                found.append(f)
    return found


def read_config(repo: Repo, path: str) -> dict:
    """The launch values of one config: fields, which came from defaults, and the files read."""
    env, read, missing = {}, [], []
    run_config(repo, path, env, read, missing)
    home = config_home(path)
    yaml = {}
    for f in impl_files(repo, home, (".yaml", ".yml"), 4):
        for k, v in flatten_yaml(repo.read(f) or "").items():
            if k not in yaml or ("${" in v and "${" not in yaml[k]):
                yaml[k] = v
    c = {"path": path, "env": env, "missing": missing, "defaults": set(), "notes": [], "yaml": bool(yaml)}
    if missing:
        c["notes"].append("sourced file(s) absent: " + ", ".join(m.rsplit("/", 1)[-1] for m in missing))
    for field, key in YAML_KEYS.items():
        value, used = None, set()
        names = [n for n in ALIASES[field] if env.get(n) is not None]
        if field in ("nodes", "gpus") and not names:
            pass  # unset: the name's NxG, then the yaml default (below)
        elif key in yaml and "oc.env" in yaml[key]:
            r = Resolver(yaml, env)
            try:
                value = r.value(key)
            except (ValueError, TypeError, ZeroDivisionError, IndexError) as exc:
                c["notes"].append(f"{key}: {exc}")
            used = r.defaults
        elif names:
            value = decode(env[names[0]])
        elif key in yaml and field != "gbs":
            value, used = decode(yaml[key]), {key}
        if missing and used - set(ALIASES["pp"]):
            value = None  # it would be a yaml default, but the absent sourced file may have set it
        elif used and value is not None:
            c["defaults"].add(field)
        c[field] = value
    if missing and "pp" in c["defaults"]:
        c["notes"].append("PP unset: the yaml default 1 assumed")
    m = re.search(r"_(\d+)x(\d+)x", path.rsplit("/", 1)[-1])
    for field, group in (("nodes", 1), ("gpus", 2)):
        if c[field] is None and m:
            c[field] = int(m.group(group))
            c["notes"].append(f"{field} from the config's name")
        elif c[field] is None and YAML_KEYS[field] in yaml and not missing:
            c[field] = Resolver(yaml, env).value(YAML_KEYS[field])
    if c["gbs"] is None and all(as_int(c[k]) for k in ("tp", "cp", "nodes", "gpus")) and as_int(env.get("MINIBS")):
        if c["pp"] is None:
            c["pp"] = 1
            c["defaults"].add("pp")
            c["notes"].append("PP unset: 1 assumed")
        dp = as_int(c["nodes"]) * as_int(c["gpus"]) // (as_int(c["tp"]) * as_int(c["pp"]) * as_int(c["cp"]))
        c["gbs"] = as_int(env["MINIBS"]) * dp
        c["notes"].append("GBS = MINIBS * world/(TP*PP*CP) (no yaml formula)")
    fp8, fp4 = truthy(c["fp8"]), truthy(c["fp4"])
    if fp4:
        c["precision"], c["precision_from"], flag = "fp4", f"FP4={c['fp4']} FP4_RECIPE={c['fp4_recipe']}", "fp4"
    elif fp8:
        recipe = f" FP8_RECIPE={c['fp8_recipe']}" if c["fp8_recipe"] else ""
        c["precision"], c["precision_from"], flag = "fp8", f"FP8={c['fp8']}{recipe}", "fp8"
    elif fp8 is False and fp4 is not None or fp8 is False and not missing:
        c["precision"], c["precision_from"], flag = "bf16", f"FP8={c['fp8']}", "fp8"
    else:
        why = "unknown: a sourced file is absent" if missing else "neither config nor yaml sets FP8/FP4"
        c["precision"], c["precision_from"], flag = None, why, None
        for f in [] if missing else impl_files(repo, home, (".py",), 2):
            if re.search(r"""\bfp8\s*=\s*["']hybrid["']""", repo.read(f) or ""):
                c["precision"], c["precision_from"], flag = "fp8", f'fp8="hybrid" in {f[len(home) + 1:]}', "code"
                break
    if flag in c["defaults"] or flag == "code":
        c["defaults"].add("precision")
        c["precision_from"] += " (default)"
    if fp4 and as_int(env.get("HEALING_ITER")):  # llama2_70b_lora's NVFP4 recipe: a higher precision at the end
        c["precision_from"] += (f"; from step HEALING_ITER={env['HEALING_ITER']} on: "
                                f"HEALING_PRECISION={env.get('HEALING_PRECISION') or 'the yaml default'}")
    c["defaults"] = sorted(c["defaults"] & {"tp", "pp", "cp", "vp", "mbs", "precision"})
    for k in ("tp", "pp", "cp", "vp", "mbs", "gbs", "nodes", "gpus", "seq"):
        c[k] = as_int(c[k])
    return c


# ---------------------------------------------------------------- logs
def parse_log(text: str) -> dict:
    """Hyperparameters, the config the log names, the layout it prints and its training throughput records."""
    out = {"hp": {}, "dlpal": None, "groups": {}, "interval": [], "throughput": [], "block": [], "cp_comm": None}
    for line in text.splitlines():
        at = line.find(":::MLLOG")
        if at < 0:
            if ":::DLPAL" in line and not line.lstrip().startswith("+"):
                out["dlpal"] = line.split()[-1].strip("'")
            printed = CP_COMM_PRINTED.match(line)  # NeMo's dump of its model config at start
            if printed and out["cp_comm"] is None:
                out["cp_comm"] = printed.group(1)
            for field, name in GROUPS.items():
                m = re.search(rf"All {name} group ranks: \[\[([\d, ]*)\]", line)
                if m and field not in out["groups"]:
                    out["groups"][field] = len(m.group(1).split(","))
            continue
        try:
            rec = json.loads(line[at + 8:])
        except ValueError:
            continue
        key, value = rec.get("key"), rec.get("value")
        if key == "tracked_stats" and isinstance(value, dict):
            t, x = value.get("train_step_time"), value.get("throughput")
            if isinstance(t, (int, float)) and "reduced_train_loss" in value and t > 0:
                out["interval"].append(t)
            elif isinstance(x, (int, float)) and x > 0:
                out["throughput"].append(x)
            elif isinstance(t, (int, float)) and t > 0:
                out["block"].append(t)
        elif isinstance(value, (int, float, str)) and not isinstance(value, bool):
            out["hp"].setdefault(key, value)
    return out


def run_samples_per_s(log: dict) -> tuple[float | None, str | None]:
    gbs = log["hp"].get("global_batch_size")
    if log["throughput"]:
        return statistics.median(log["throughput"]), "block throughput"
    if log["block"] and gbs:
        return gbs / statistics.median(log["block"]), "block train_step_time"
    if log["interval"] and gbs:
        return gbs / statistics.median(log["interval"]), "per-interval train_step_time"
    return None, None


# ---------------------------------------------------------------- matching
def family(text: str) -> str | None:
    for p in PLATFORMS:
        if p in text.upper():
            return p
    return None


def near(a, b) -> bool:
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return True  # not comparable: not a check
    return math.isclose(a, b, rel_tol=1e-6)


def checks(c: dict, nodes: int, gpus: int, accel: str, log: dict) -> tuple[list[str], list[str]]:
    """(checks passed, checks failed) of one candidate against the system and its log."""
    ok, bad = [], []

    def check(name, passed):
        (ok if passed else bad).append(name)
    check(f"nodes {nodes}" if c["nodes"] == nodes else f"nodes {c['nodes']}!={nodes}", c["nodes"] == nodes)
    check(f"gpus {gpus}" if c["gpus"] == gpus else f"gpus/node {c['gpus']}!={gpus}", c["gpus"] == gpus)
    named = family(c["path"].rsplit("/", 1)[-1])
    if named and family(accel) and named.startswith("MI") != family(accel).startswith("MI"):
        check(f"platform {named} is not {family(accel)}'s vendor", False)
    hp = log["hp"]
    gbs = as_int(hp.get("global_batch_size"))
    if gbs is not None and c["gbs"] is None:
        check("GBS not computable from the config" + (" (a sourced file is absent)" if c["missing"] else ""), False)
    if gbs is not None and c["gbs"] is not None:
        check(f"GBS {gbs}" if c["gbs"] == gbs else f"GBS {c['gbs']}!={gbs}", c["gbs"] == gbs)
        model = [c[k] for k in ("tp", "cp", "mbs")] + [c["pp"] or 1]
        ga = hp.get("gradient_accumulation_steps")
        if all(model) and ga is not None and c["gbs"] == gbs:
            want = gbs / (c["mbs"] * nodes * gpus / (c["tp"] * (c["pp"] or 1) * c["cp"]))
            check(f"GA {ga}" if near(want, ga) else f"GA {want:g}!={ga}", near(want, ga))
    for name, variables, keys in LOG_CHECKS:
        mine = next((c["env"][v] for v in variables if c["env"].get(v) not in (None, "")), None)
        theirs = next((hp[k] for k in keys if k in hp), None)
        if mine is not None and theirs is not None:
            check(f"{name} {theirs}" if near(mine, theirs) else f"{name} {mine}!={theirs}", near(mine, theirs))
    seq = hp.get("max_sequence_length")
    if seq is not None and c["seq"] is not None:
        check(f"seq {seq}" if near(seq, c["seq"]) else f"seq {c['seq']}!={seq}", near(seq, c["seq"]))
    for k, v in log["groups"].items():
        mine = (c[k] or 1) if k == "pp" else c[k]
        if mine is not None:
            check(f"log {k.upper()} {v}" if mine == v else f"{k.upper()} {mine}!=log {v}", mine == v)
    return ok, bad


def preferences(submitter: str, system: str, accel: str, dlpal: str | None):
    base = re.sub(r"^\d+x", "", system).lower()

    def named_folder(c):
        folders = c["path"].split("/")[:-1]
        return any(f == system or (len(f) > 3 and re.match(re.escape(f) + r"[._-]", system)) for f in folders[3:])

    def names_system(c):
        key = re.sub(r"^config_|_\d+x\d+x.*$|\.sh$", "", c["path"].rsplit("/", 1)[-1]).lower()
        return len(key) >= 6 and (key in system.lower() or base in key)
    return (("the log's DGXSYSTEM " + str(dlpal), lambda c: dlpal is not None
             and c["path"].rsplit("/", 1)[-1] == f"config_{dlpal}.sh"),
            ("in a folder named for the system", named_folder),
            ("its name contains the system's", names_system),
            (f"platform {family(accel)} in its name", lambda c: family(accel) is not None
             and family(c["path"].rsplit("/", 1)[-1]) == family(accel)))


# ---------------------------------------------------------------- rows
def build_rows(repo: Repo, round_: str, benchmarks: tuple = ()) -> list[dict]:
    """One row per system-benchmark of the round (``benchmarks``: these instead of the round's own)."""
    runs: dict[tuple, list[str]] = {}
    for f in repo.files:
        p = f.split("/")
        if len(p) == 5 and p[1] == "results" and p[3] in (benchmarks or BENCHMARKS[round_]) \
                and re.fullmatch(r"result_.+\.txt", p[4]):
            runs.setdefault((p[3], p[0], p[2]), []).append(f)
    configs: dict[tuple, list[dict]] = {}
    rows = []
    for (bench, submitter, system), logs_paths in sorted(runs.items()):
        sysj = json.loads(repo.read(f"{submitter}/systems/{system}.json") or "{}")
        nodes, gpus = as_int(sysj.get("number_of_nodes")), as_int(sysj.get("accelerators_per_node"))
        accel = sysj.get("accelerator_model_name")
        logs_paths.sort(key=lambda f: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", f)])
        logs, missing = [], []
        for f in logs_paths:
            text = repo.read(f, keep=False)
            if text is None:
                missing.append(f)
            else:
                logs.append(parse_log(text))
        merged = {"hp": {}, "dlpal": None, "groups": {}, "cp_comm": None}
        for log in logs:
            for k, v in log["hp"].items():
                merged["hp"].setdefault(k, v)
            merged["dlpal"] = merged["dlpal"] or log["dlpal"]
            merged["cp_comm"] = merged["cp_comm"] or log["cp_comm"]
            for k, v in log["groups"].items():
                merged["groups"].setdefault(k, v)
        key = (submitter, bench)
        if key not in configs:
            prefix = f"{submitter}/benchmarks/{bench}/"
            configs[key] = [read_config(repo, f) for f in repo.files if f.startswith(prefix)
                            and re.fullmatch(r"config_.*\.sh", f.rsplit("/", 1)[-1])
                            and not re.search(r"common|mounts", f.rsplit("/", 1)[-1])]
        cands = configs[key]
        judged = [(c, *checks(c, nodes, gpus, accel, merged)) for c in cands]
        passed = [c for c, _, bad in judged if not bad]
        why = []
        if not logs:
            why.append("no readable log (blobs missing): nodes/GPUs and names only")
        if passed:
            why.append(f"{len(passed)} of {len(cands)} configs pass " + ", ".join(judged[cands.index(passed[0])][1]))
            differ = [k for k in ("tp", "pp", "cp", "vp", "mbs", "precision") if len({c[k] for c in passed}) > 1]
            if differ:
                why.append("those differ in " + "/".join(differ))
            for name, prefer in preferences(submitter, system, accel, merged["dlpal"]):
                if len(passed) > 1 and 0 < sum(map(prefer, passed)) < len(passed):
                    passed = [c for c in passed if prefer(c)]
                    why.append(f"{len(passed)} {name}")
        elif cands:
            close = sorted(judged, key=lambda j: len(j[2]))[:3]
            why.append(f"none of {len(cands)} configs passes; closest: " + "; ".join(
                f"{c['path'].rsplit('/', 1)[-1]} ({', '.join(bad)})" for c, _, bad in close))
        else:
            why.append(f"no config_*.sh under {submitter}/benchmarks/{bench}/")
        if merged["dlpal"] and not any(c["path"].endswith(f"/config_{merged['dlpal']}.sh") for c in cands):
            why.append(f"the log names config_{merged['dlpal']}.sh, which the submission lacks")
        row = {"round": round_, "submitter": submitter, "system": system, "benchmark": bench,
               "accelerator": accel, "nodes": nodes, "devices_per_node": gpus, "framework": sysj.get("framework")}
        layout = dict.fromkeys(("tp", "pp", "cp", "vp", "micro_batch_size"))
        precision, defaults, layout_from, precision_from = None, [], None, None
        recompute = dict.fromkeys((*RECOMPUTE, *SPLIT))
        if passed:
            fields = [{"tp": c["tp"], "pp": c["pp"], "cp": c["cp"], "vp": c["vp"], "micro_batch_size": c["mbs"],
                       "precision": c["precision"], **recompute_of(c), **split_of(c)} for c in passed]
            agreed = all(f == fields[0] for f in fields)
            if len(passed) == 1 or agreed:
                layout = {k: v for k, v in fields[0].items() if k != "precision" and k not in (*RECOMPUTE, *SPLIT)}
                recompute = {k: fields[0][k] for k in (*RECOMPUTE, *SPLIT)}
                precision, precision_from = fields[0]["precision"], passed[0]["precision_from"]
                defaults = sorted(set().union(*(c["defaults"] for c in passed)))
                defaults = ["micro_batch_size" if d == "mbs" else d for d in defaults if d != "gbs"]
                layout_from = "config" if len(passed) == 1 else "config candidates (all agree)"
            notes = sorted(set(n for c in passed for n in c["notes"]))
            if notes:
                why.append("notes: " + "; ".join(notes))
        elif merged["groups"]:
            layout.update({k: v for k, v in merged["groups"].items()})
            layout_from = "log"
            why.append("layout from the log's process-group lines")
        gbs = as_int(merged["hp"].get("global_batch_size"))
        seq = as_int(merged["hp"].get("max_sequence_length")) or BENCH_SEQ.get(bench)
        if seq is None and passed and len({c["seq"] for c in passed}) == 1:
            seq = passed[0]["seq"]
        from_configs = passed if layout_from and layout_from != "log" else []
        row.update(layout, global_batch_size=gbs, seq_length=seq, precision=precision, **recompute,
                   **fp8_of(from_configs, precision), cp_comm_type=cp_comm_of(from_configs) or merged["cp_comm"])
        row["precision_from"] = precision_from
        row["config"] = passed[0]["path"] if len(passed) == 1 else None
        if len(passed) > 1:
            row["config_candidates"] = [c["path"] for c in passed]
            same = len({repo.read(c["path"]) for c in passed}) == 1
            why.insert(0, f"ambiguous: {len(passed)} configs match equally"
                          + (" (byte-identical copies)" if same else "")
                          + ("; they agree on the layout" if layout_from else "; they disagree on the layout"))
        elif passed:
            why.insert(0, "unique" if logs else "unique but unverified (no readable log)")
        else:
            why.insert(0, "unmatched")
        row["match"] = "; ".join(why)
        row["layout_from"] = layout_from
        row["defaults_used"] = defaults
        per_run, kinds = [], {}
        devices = nodes * gpus if nodes and gpus else None
        for log in logs:
            sps, kind = run_samples_per_s(log)
            if sps is not None and devices and seq:
                per_run.append(round(sps * seq / devices, 2))
                kinds[kind] = kinds.get(kind, 0) + 1
        row["runs"] = len(logs_paths)
        row["tokens_per_s_per_device"] = round(statistics.median(per_run), 2) if per_run else None
        row["tokens_per_s_per_device_runs"] = per_run
        lacking = len(logs) - len(per_run)
        row["throughput_from"] = (", ".join(f"{k} ({n} runs)" for k, n in sorted(kinds.items()))
                                  + (f", {lacking} run(s) without training step records" if lacking else "")
                                  + f"; median per run, median over runs; x {seq} tokens / {devices} devices"
                                  if per_run else "no training tracked_stats" if logs else "no readable log")
        if missing:
            row["missing_logs"] = missing
        row["source_commit"] = repo.commit
        rows.append(row)
    return rows


RECOMPUTE = ("recompute", "recompute_method", "recompute_num_layers")


def recompute_of(c: dict) -> dict:
    """Activation recompute as the config sets it (NeMo's activations_checkpoint_* or Megatron's recompute_*, from
    ACG/ACM/ACL or RECOMPUTE_*): granularity (full | selective | None: off), method (uniform | block), layers."""
    granularity = c.get("acg") if c.get("acg") in ("full", "selective") else None
    full = granularity == "full"
    return {"recompute": granularity, "recompute_method": c.get("acm") if full else None,
            "recompute_num_layers": as_int(c.get("acl")) if full else None}


SPLIT = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")


def split_of(c: dict) -> dict:
    """Megatron's uneven pipeline split as the config sets it (NeMo's model.account_for_*_in_pipeline_split, from
    ASYM_PP_EMBED / ASYM_PP_LOSS): True, or False where it is off or unset."""
    return {"account_for_embedding_in_pipeline_split": truthy(c.get("split_embedding")) is True,
            "account_for_loss_in_pipeline_split": truthy(c.get("split_loss")) is True}


def fp8_of(passed: list[dict], precision: str | None) -> dict:
    """Transformer Engine's FP8 as the config sets it, where its candidates agree: ``fp8_recipe``, the recipe named
    (FP8_RECIPE or the yaml's model.fp8_recipe default; null where neither names one: the framework's default), and
    ``fp8_attention``, attention in FP8 too (FP8_DPA, model.fp8_dot_product_attention; false where off or unset)."""
    recipes = {c.get("fp8_recipe") if precision == "fp8" else None for c in passed}
    # unknown (null) where a sourced file is absent: it may have set FP8_DPA
    attention = {None if c["missing"] and precision == "fp8" else truthy(c.get("fp8_dpa")) is True and precision == "fp8"
                 for c in passed}
    return {"fp8_recipe": recipes.pop() if len(recipes) == 1 else None,
            "fp8_attention": attention.pop() if len(attention) == 1 else None}


def cp_comm_of(passed: list[dict]) -> str | None:
    """Context parallelism's exchange as the config or its yaml sets it (CP_COMM_TYPE, model.cp_comm_type: NVIDIA's
    LoRA yaml defaults to a2a), where the candidates agree; p2p (Megatron-core's default) where the implementation's
    yaml leaves it unset; null where a sourced file is absent (it may have set it), where the submission has no yaml
    (its container's decides) or no config matched."""
    kinds = {None if c["missing"] else str(c["cp_comm"]) if c.get("cp_comm") is not None else "p2p" if c["yaml"] else None
             for c in passed}
    return kinds.pop() if len(kinds) == 1 else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for round_ in BENCHMARKS:
        ap.add_argument(f"--{round_.replace('.', '')}", help=f"git dir of mlcommons/training_results_{round_}")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent), help="folder for the JSON files")
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for round_ in BENCHMARKS:
        git_dir = getattr(args, round_.replace(".", ""))
        if git_dir is None:
            continue
        repo = Repo(git_dir)
        splits = [((), OUT_NAMES[round_])] + ([HELD_OUT_SPLITS[round_]] if round_ in HELD_OUT_SPLITS else [])
        for benchmarks, name in splits:
            rows = build_rows(repo, round_, benchmarks)
            path = Path(args.out) / name
            path.write_text(json.dumps(rows, indent=1) + "\n")
            print(f"{path.name}: {len(rows)} rows")


if __name__ == "__main__":
    main()
