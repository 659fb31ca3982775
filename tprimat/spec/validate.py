"""Every cross-field rule of a run spec, checked once before anything runs.

``validate`` returns one line per violation, each naming the key(s), their values and the rule.
An empty list means the spec can be planned and handed to a backend.
"""

from __future__ import annotations

import os
from typing import Optional

from tprimat.spec import memory
from tprimat.spec.compat import COMPILE_MODES, TE_RECIPES, TORCHAO_RECIPES, get, incompatible, te_scaling
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.flops import stages_of
from tprimat.spec.frameworks import model_problem, problem_with
from tprimat.spec.hardware import DEVICES, PLATFORM_PRECISIONS, lookup
from tprimat.spec.keeps import MEGATRON_CORE
from tprimat.spec.kernels import FP8_ATTENTION_FRAMEWORKS
from tprimat.spec.peft import check_peft
from tprimat.spec.plan import derived_dp, device_memory, world_size
from tprimat.spec.schema import TprimatConf, ac_period, all_to_all_cp, pipeline_split
from tprimat.spec.secrets import wandb_credentials

CHOICES = {
    "platform.name": ("cpu", "nvidia", "amd"),
    "model.family": ("llama", "qwen2", "mistral", "gpt2"),
    "model.norm": ("rmsnorm", "layernorm"),
    "model.mlp": ("swiglu", "gelu"),
    "model.position_embedding": ("rope", "learned"),
    "methodology.name": ("maximum_performance", "identical_config"),
    "parallelism.pp_schedule": ("gpipe", "1f1b"),
    "parallelism.cp_comm_type": ("p2p", "a2a"),
    "training.precision": ("bf16", "fp32", "fp8"),
    "training.activation_checkpointing": ("none", "full", "selective"),
    "training.compile_mode": COMPILE_MODES,
    "training.fp8.recipe": (*TORCHAO_RECIPES, *TE_RECIPES),
    "profile.tool": ("torch", "nsys", "rocprof"),
    "training.optimizer.name": ("adamw",),
    "logging.wandb.mode": ("offline", "online", "disabled"),
    "benchmark.projection": ("roofline", "measured-slice"),
    # a platform's tuned precision becomes training.precision under maximum_performance: named where it is set
    "platform.tuned.precision": ("bf16", "fp32", "fp8", "auto"),
}
DRY_RUN = (False, True, "deep")  # deep: also build the native layout in a fake world and trace its memory
# the frameworks whose configuration surface changed between releases: which one a run targets
FLAVOURS = {"nemo": ("nemo2", "bridge"), "torchtitan": ("registry", "toml")}
POSITIVE = (
    "platform.devices_per_node", "platform.nodes", "parallelism.tp", "parallelism.pp", "parallelism.cp",
    "parallelism.dp", "parallelism.vp", "training.global_batch_size", "training.micro_batch_size", "training.seq_length",
    "training.max_steps", "benchmark.repeats", "logging.log_every_steps", "model.num_layers",
    "model.hidden_size", "model.ffn_hidden_size", "model.num_attention_heads", "model.num_kv_heads",
    "model.head_dim", "model.vocab_size", "model.max_position_embeddings", "model.vocab_pad_multiple",
    "model.rope_original_max_position",  # Llama 3.1's RoPE scaling divides by it
)
POSITIVE_REAL = ("training.optimizer.eps", "model.rope_theta", "model.rms_norm_eps", "model.rope_low_freq_factor",
                 "model.rope_high_freq_factor", "model.rope_scaling_factor", "platform.price_per_device_hour_usd",
                 "platform.power_limit_w", "benchmark.telemetry_interval_s", "framework.timeout_min",
                 "benchmark.init_timeout_s", "benchmark.collective_timeout_s")
TOKEN_ID_BYTES = 16  # int64 inputs and labels: what one token of a step's batch holds at the least
# Model and sequence sizes past which a value is a typo, not a model: at least twice the largest published dense
# decoder's (Llama 3.1 405B: hidden 16,384, FFN 53,248, 126 layers, 128 heads; Gemma's 256,000-entry vocabulary;
# Llama 4 Scout's 10 M-token context). Sizes beyond them would only ever reach the memory check, which then
# reports terabytes instead of naming the key.
UPPER_BOUNDS = {"model.hidden_size": 65_536, "model.ffn_hidden_size": 262_144, "model.num_layers": 1_024,
                "model.num_attention_heads": 1_024, "model.num_kv_heads": 1_024, "model.head_dim": 4_096,
                "model.vocab_size": 4_194_304, "model.max_position_embeddings": 33_554_432,
                "training.seq_length": 33_554_432}
# The largest scale-up domain tprimat's hardware table holds: GB200 / GB300 NVL72, 72 GPUs behind one NVLink switch
# (tprimat/spec/hardware.py); a node of more devices is a typo, named as such before the batch rule it breaks
MAX_DEVICES_PER_NODE = 72
NON_NEGATIVE = ("benchmark.warmup_steps", "training.optimizer.warmup_steps", "training.optimizer.weight_decay",
                "training.optimizer.grad_clip", "training.optimizer.min_lr")


def validate(spec: TprimatConf, hw: DetectedHardware, dry_run: bool = False) -> list[str]:
    problems = check_choices(spec) + check_ranges(spec)
    if problems:  # the cross-field rules below divide by these values
        return problems
    return (check_layout(spec) + check_batch(spec) + check_model(spec) + check_schedule(spec)
            + check_hardware(spec, hw, dry_run) + check_precision(spec) + check_options(spec) + check_peft(spec)
            + check_memory(spec, hw)
            + check_wandb(spec, dry_run))


# W&B's own rule for a project name (wandb/sdk/wandb_settings.py, Settings.validate_project): its client raises
# UsageError at wandb.init, after the model is built, and the run ends with no result.json
WANDB_PROJECT_CHARS, WANDB_PROJECT_MAX = "/\\#?%:", 128


def check_wandb(spec: TprimatConf, dry_run: bool) -> list[str]:
    """W&B's rules before anything trains (else the W&B client's traceback, and no result); a dry run refuses what
    the launch would: the project name, and credentials for online."""
    wandb, problems = spec.logging.wandb, []
    if wandb.mode != "disabled" and (set(WANDB_PROJECT_CHARS) & set(wandb.project or "")
                                     or len(wandb.project or "") > WANDB_PROJECT_MAX or not wandb.project):
        problems.append(f"logging.wandb.project={wandb.project}: W&B project names are 1-{WANDB_PROJECT_MAX} "
                        f"characters without any of {' '.join(WANDB_PROJECT_CHARS)}")
    if wandb.mode == "online" and not wandb_credentials():
        problems.append("logging.wandb.mode=online: no W&B credentials (set WANDB_API_KEY or run `wandb login`); "
                        "logging.wandb.mode=offline records the run locally for `wandb sync` later")
    return problems


FP8_ATTENTION_REFUSED = {
    "megatron": "Megatron-LM's command line has no flag for it (core_v0.16.1's arguments.py excludes "
                "fp8_dot_product_attention from the TransformerConfig arguments it builds)",
    "primus": "Primus's Megatron trainer takes Megatron-LM's arguments, which exclude fp8_dot_product_attention",
}
FP8_ATTENTION_SDPA = ("attention runs through torch's scaled_dot_product_attention in BF16 (torchao float8 and "
                      "DeepSpeed convert linear layers only)")


def check_cp_comm_type(spec: TprimatConf) -> list[str]:
    """parallelism.cp_comm_type=a2a: Megatron-core's all-to-all context parallelism, whose attention (Transformer
    Engine's AttnFuncWithCPAndQKVOA2A) asserts that each rank's query and key/value heads divide by cp."""
    par, model = spec.parallelism, spec.model
    if not all_to_all_cp(spec):
        return []
    if spec.framework.name not in MEGATRON_CORE:
        return [f"parallelism.cp_comm_type=a2a, framework.name={spec.framework.name}: all-to-all context parallelism "
                "is Megatron-core's (framework=megatron, nemo, primus); the others run a ring (p2p)"]
    heads, kv = model.num_attention_heads // par.tp, model.num_kv_heads // par.tp
    if heads % par.cp or kv % par.cp:
        return [f"parallelism.cp_comm_type=a2a, parallelism.cp={par.cp}: each rank's {heads} query and {kv} key/value "
                f"heads (model heads / parallelism.tp={par.tp}) must divide by cp"]
    return []


def check_fp8_attention(spec: TprimatConf) -> list[str]:
    """training.fp8.attention: FP8 attention needs FP8 training and a framework whose launch takes it (NeMo 2's and
    Megatron-Bridge's mixed precision, fp8_dot_product_attention)."""
    tr, name = spec.training, spec.framework.name
    if not tr.fp8.attention:
        return []
    if tr.precision != "fp8":
        return [f"training.fp8.attention=true, training.precision={tr.precision}: FP8 attention needs "
                "training.precision=fp8"]
    if name not in FP8_ATTENTION_FRAMEWORKS:
        return [f"training.fp8.attention=true, framework.name={name}: "
                f"{FP8_ATTENTION_REFUSED.get(name, FP8_ATTENTION_SDPA)}; framework=nemo takes it"]
    return []


def check_options(spec: TprimatConf) -> list[str]:
    """The optimisation options: each one's own rule, then the compatibility table (``tprimat.spec.compat``)."""
    tr, problems = spec.training, []
    if tr.compile_mode != "default" and not tr.compile:
        problems.append(f"training.compile_mode={tr.compile_mode}, training.compile=false: a compile mode needs "
                        "training.compile=true")
    if tr.fp8.recipe != "tensorwise" and tr.precision != "fp8":
        problems.append(f"training.fp8.recipe={tr.fp8.recipe}, training.precision={tr.precision}: an fp8 recipe needs "
                        "training.precision=fp8")
    if tr.precision == "fp8" and spec.framework.name in MEGATRON_CORE and te_scaling(spec) is None:
        problems.append(f"training.fp8.recipe={tr.fp8.recipe}, framework.name={spec.framework.name}: the Megatron-core "
                        "frameworks scale fp8 through Transformer Engine: delayed, or per-tensor current scaling (current, "
                        "or tensorwise: Megatron's --fp8-recipe tensorwise); row-wise scaling has no recipe there")
    if ac_period(tr.ac_frequency) != 2 and spec.framework.name not in ("native", "deepspeed"):
        problems.append(f"training.ac_frequency={tr.ac_frequency}, framework.name={spec.framework.name}: only "
                        "framework=native and deepspeed recompute every k-th layer; the others choose their own selection")
    problems += check_recompute_layers(spec) + check_fp8_attention(spec) + check_cp_comm_type(spec)
    preflight = spec.benchmark.preflight_file
    if preflight is not None and not os.path.isfile(preflight):
        problems.append(f"benchmark.preflight_file={preflight}: no such file (a tprimat preflight JSON; null: the "
                        "hardware table's ceilings)")
    return problems + incompatible(spec, derived_dp(spec)) + check_profile(spec)


def check_recompute_layers(spec: TprimatConf) -> list[str]:
    """training.recompute_num_layers: Megatron's block method, under full recompute, 1..the layers of a stage."""
    n, tr = spec.training.recompute_num_layers, spec.training
    if n is None:
        return []
    per_stage = max(stages_of(spec))
    if tr.activation_checkpointing != "full" or spec.framework.name not in (*MEGATRON_CORE, "megatron_deepspeed"):
        return [f"training.recompute_num_layers={n}, training.activation_checkpointing={tr.activation_checkpointing}, "
                f"framework.name={spec.framework.name}: recomputing the first N layers of each stage (Megatron's "
                "block method) needs activation_checkpointing=full and a Megatron-core framework (megatron, nemo, "
                "primus, megatron_deepspeed)"]
    if not isinstance(n, int) or not 1 <= n <= per_stage:
        return [f"training.recompute_num_layers={n}: must be an integer in 1..{per_stage} (the layers of a pipeline "
                "stage), or null for every layer"]
    return []


def check_profile(spec: TprimatConf) -> list[str]:
    prof, warmup, steps = spec.profile, spec.benchmark.warmup_steps, spec.training.max_steps
    if not prof.enabled:
        return []
    problems = []
    chosen = list(prof.steps) if prof.steps is not None else None
    if chosen is not None and (len(chosen) != 2 or not warmup < chosen[0] <= chosen[1] <= steps):
        problems.append(f"profile.steps={chosen}: must be [first, last] measured step numbers, "
                        f"benchmark.warmup_steps={warmup} < first <= last <= training.max_steps={steps}")
    elif chosen is None and warmup + 2 > steps:
        problems.append(f"profile.enabled=true, benchmark.warmup_steps={warmup}, training.max_steps={steps}: the "
                        "default profiled steps are the first two measured ones; raise max_steps or set profile.steps")
    world = world_size(spec)
    bad = [r for r in prof.ranks if not 0 <= r < world]
    if bad or not prof.ranks:
        problems.append(f"profile.ranks={list(prof.ranks)}: must list ranks in 0..{world - 1}")
    return problems


def profiled_steps(spec: TprimatConf) -> tuple[int, int]:
    """``profile.steps``, or the first two measured steps."""
    if spec.profile.steps is not None:
        return spec.profile.steps[0], spec.profile.steps[1]
    first = spec.benchmark.warmup_steps + 1
    return first, first + 1


def check_choices(spec: TprimatConf) -> list[str]:
    problems = [f"{key}={get(spec, key)}: must be one of {', '.join(options)}"
                for key, options in CHOICES.items() if get(spec, key) not in options]
    if spec.dry_run not in DRY_RUN:
        problems.append(f"dry_run={spec.dry_run}: must be one of true, false, deep")
    if ac_period(spec.training.ac_frequency) is None:
        problems.append(f"training.ac_frequency={spec.training.ac_frequency}: must be an integer k >= 1 or \"1/k\" "
                        "(every k-th layer recomputed under activation_checkpointing=selective)")
    if not str(spec.model.name).strip():
        problems.append("model.name='': must name the model (a conf/model entry, or your own name for its shape)")
    flavours = FLAVOURS.get(spec.framework.name, sorted({f for fs in FLAVOURS.values() for f in fs}))
    if spec.framework.flavour not in flavours:
        problems.append(f"framework.flavour={spec.framework.flavour}: must be one of {', '.join(flavours)}"
                        + ("" if spec.framework.name in FLAVOURS else " (only nemo and torchtitan read it)"))
    framework = problem_with(spec.framework.name)
    return problems + ([framework] if framework else [])


def check_ranges(spec: TprimatConf) -> list[str]:
    problems = [f"{key}={get(spec, key)}: must be >= 1" for key in POSITIVE
                if get(spec, key) is not None and get(spec, key) < 1]
    problems += [f"{key}={get(spec, key)}: must be >= 0" for key in NON_NEGATIVE if get(spec, key) < 0]
    problems += [f"{key}={get(spec, key)}: must be <= {bound:,} (at least twice the largest published decoder's; "
                 "tprimat.spec.validate.UPPER_BOUNDS)" for key, bound in UPPER_BOUNDS.items()
                 if get(spec, key) is not None and get(spec, key) > bound]
    if spec.platform.devices_per_node > MAX_DEVICES_PER_NODE:
        problems.append(f"platform.devices_per_node={spec.platform.devices_per_node}: must be <= "
                        f"{MAX_DEVICES_PER_NODE} (the largest scale-up domain in the hardware table, an NVL72); more "
                        "devices are more nodes (platform.nodes)")
    opt = spec.training.optimizer
    if opt.lr <= 0:
        problems.append(f"training.optimizer.lr={opt.lr}: must be > 0")
    elif opt.min_lr > opt.lr:
        problems.append(f"training.optimizer.min_lr={opt.min_lr}, training.optimizer.lr={opt.lr}: "
                        "min_lr must not exceed lr")
    problems += [f"{key}={get(spec, key)}: must be > 0" for key in POSITIVE_REAL
                 if get(spec, key) is not None and not get(spec, key) > 0]
    for key in ("training.optimizer.beta1", "training.optimizer.beta2"):
        if not 0 <= get(spec, key) < 1:
            problems.append(f"{key}={get(spec, key)}: must be in [0, 1)")
    if spec.parallelism.zero_stage not in (0, 1, 2, 3):
        problems.append(f"parallelism.zero_stage={spec.parallelism.zero_stage}: must be 0, 1, 2 or 3")
    return problems


def pipeline_units(spec: TprimatConf) -> tuple[int, str]:
    """The units Megatron-core splits over pipeline stages (the layers, plus the embedding and the loss where the
    spec counts them: its ``get_num_layers_to_build``), and the keys that added any, for the message."""
    embedding, loss = pipeline_split(spec)
    keys = [key for key, on in (("account_for_embedding_in_pipeline_split", embedding),
                                ("account_for_loss_in_pipeline_split", loss)) if on]
    return spec.model.num_layers + len(keys), "".join(f", parallelism.{key}=true" for key in keys)


def check_layout(spec: TprimatConf) -> list[str]:
    par, world = spec.parallelism, world_size(spec)
    model_parallel = par.tp * par.pp * par.cp
    factors = (f"platform.devices_per_node={spec.platform.devices_per_node} * platform.nodes={spec.platform.nodes}"
               f" = {world}")
    problems = []
    if par.dp is not None and model_parallel * par.dp != world:
        problems.append(f"{factors}, parallelism.tp={par.tp} * pp={par.pp} * cp={par.cp} * dp={par.dp} = "
                        f"{model_parallel * par.dp}: world size must equal tp * pp * cp * dp")
    elif par.dp is None and world % model_parallel:
        problems.append(f"{factors}, parallelism.tp={par.tp} * pp={par.pp} * cp={par.cp} = {model_parallel}: "
                        "world size must be a multiple of tp * pp * cp (dp = world size / (tp * pp * cp))")
    if par.fsdp and par.zero_stage:
        problems.append(f"parallelism.fsdp=true, parallelism.zero_stage={par.zero_stage}: choose one way to "
                        "shard (fsdp for native/torchtitan, zero_stage for DeepSpeed/Megatron)")
    units, counted = pipeline_units(spec)
    if par.vp > 1 and (par.pp == 1 or units % (par.pp * par.vp)):
        problems.append(f"parallelism.vp={par.vp}, parallelism.pp={par.pp}, model.num_layers={spec.model.num_layers}"
                        f"{counted}: an interleaved schedule needs pp > 1 and num_layers{' + ' if counted else ''}"
                        f"{'the counted embedding / loss' if counted else ''} divisible by pp * vp")
    split = [key for key, on in (("parallelism.account_for_embedding_in_pipeline_split",
                                  par.account_for_embedding_in_pipeline_split),
                                 ("parallelism.account_for_loss_in_pipeline_split",
                                  par.account_for_loss_in_pipeline_split)) if on]
    if split and spec.framework.name not in MEGATRON_CORE:
        problems.append(f"{'=true, '.join(split)}=true, framework.name={spec.framework.name}: only the Megatron-core "
                        f"frameworks ({', '.join(MEGATRON_CORE)}) split a pipeline unevenly (their TransformerConfig "
                        "account_for_*_in_pipeline_split)")
    if par.vp > 1 and spec.framework.name not in MEGATRON_CORE:
        problems.append(f"parallelism.vp={par.vp}, framework.name={spec.framework.name}: only the Megatron-core "
                        f"frameworks ({', '.join(MEGATRON_CORE)}) interleave pipeline stages")
    if not spec.training.grad_reduce_in_fp32 and spec.framework.name not in MEGATRON_CORE:
        problems.append(f"training.grad_reduce_in_fp32=false, framework.name={spec.framework.name}: only the "
                        f"Megatron-core frameworks ({', '.join(MEGATRON_CORE)}) reduce gradients in bf16; the others "
                        "keep the gradients of their own weights")
    if par.sequence_parallel and par.tp == 1:
        problems.append("parallelism.sequence_parallel=true, parallelism.tp=1: sequence parallelism needs tp > 1")
    return problems


def check_batch(spec: TprimatConf) -> list[str]:
    if check_layout(spec):
        return []
    tr, dp = spec.training, derived_dp(spec)
    if tr.global_batch_size % (tr.micro_batch_size * dp):
        return [f"training.global_batch_size={tr.global_batch_size}, training.micro_batch_size="
                f"{tr.micro_batch_size}, parallelism.dp={dp}: global_batch_size must be divisible by "
                f"micro_batch_size * dp = {tr.micro_batch_size * dp}"]
    return []


def check_model(spec: TprimatConf) -> list[str]:
    m, par, tr = spec.model, spec.parallelism, spec.training
    problems = []
    if m.head_dim is None and m.hidden_size % m.num_attention_heads:
        problems.append(f"model.hidden_size={m.hidden_size}, model.num_attention_heads={m.num_attention_heads}: "
                        "hidden_size must be divisible by num_attention_heads (or set model.head_dim)")
    if m.num_attention_heads % m.num_kv_heads:
        problems.append(f"model.num_attention_heads={m.num_attention_heads}, model.num_kv_heads={m.num_kv_heads}: "
                        "attention heads must be a multiple of KV heads (grouped-query attention)")
    for key in ("num_attention_heads", "num_kv_heads"):
        if getattr(m, key) % par.tp:
            problems.append(f"model.{key}={getattr(m, key)}, parallelism.tp={par.tp}: {key} must be "
                            "divisible by tp")
    units, counted = pipeline_units(spec)
    if units % par.pp:
        problems.append(f"model.num_layers={m.num_layers}, parallelism.pp={par.pp}{counted}: num_layers"
                        f"{' + the counted embedding / loss' if counted else ''} must be divisible by pp")
    if tr.seq_length % par.cp:
        problems.append(f"training.seq_length={tr.seq_length}, parallelism.cp={par.cp}: seq_length must be "
                        "divisible by cp")
    if tr.seq_length > m.max_position_embeddings:
        problems.append(f"training.seq_length={tr.seq_length}, model.max_position_embeddings="
                        f"{m.max_position_embeddings}: seq_length must not exceed the model's context")
    if (unsupported := model_problem(spec.framework.name, m)):
        problems.append(unsupported)
    return problems


def check_schedule(spec: TprimatConf) -> list[str]:
    steps, bench, opt = spec.training.max_steps, spec.benchmark, spec.training.optimizer
    problems = []
    if bench.warmup_steps >= steps:
        problems.append(f"benchmark.warmup_steps={bench.warmup_steps}, training.max_steps={steps}: at least "
                        "one measured step is needed (warmup_steps < max_steps)")
    if opt.warmup_steps > steps:
        problems.append(f"training.optimizer.warmup_steps={opt.warmup_steps}, training.max_steps={steps}: "
                        "lr warm-up must fit in the run (warmup_steps <= max_steps)")
    return problems


def check_hardware(spec: TprimatConf, hw: DetectedHardware, dry_run: bool) -> list[str]:
    plat = spec.platform
    device = lookup(plat.gpu)
    problems = []
    if plat.gpu is not None and plat.name == "cpu":
        problems.append(f"platform.gpu={plat.gpu}, platform.name=cpu: a CPU platform has no GPU")
    elif device is not None and device.vendor != plat.name:
        problems.append(f"platform.gpu={plat.gpu}, platform.name={plat.name}: {device.name} is a "
                        f"{device.vendor} device")
    if dry_run or plat.name == "cpu":
        return problems
    if hw.kind != plat.name:
        problems.append(f"platform.name={plat.name}: no {plat.name} GPU is visible here (detected: {hw.kind}, "
                        f"{hw.device_name}); use dry_run=true to plan without the hardware")
    elif plat.devices_per_node > hw.device_count:
        problems.append(f"platform.devices_per_node={plat.devices_per_node}: only {hw.device_count} "
                        f"{hw.device_name} visible on this node")
    elif plat.gpu is not None and hw.gpu_key is not None and plat.gpu != hw.gpu_key:
        problems.append(f"platform.gpu={plat.gpu}: this node has {hw.device_name} ({hw.gpu_key})")
    return problems


def check_precision(spec: TprimatConf) -> list[str]:
    precision, plat = spec.training.precision, spec.platform
    if precision not in PLATFORM_PRECISIONS[plat.name]:
        return [f"training.precision={precision}, platform.name={plat.name}: {precision} training needs FP8 "
                "tensor cores (NVIDIA H100/H200/B200, AMD MI300X and later); a CPU has none"]
    device = lookup(plat.gpu)
    if device is not None and not device.supports(precision):
        return [f"training.precision={precision}, platform.gpu={plat.gpu}: {device.name} has no {precision} "
                "tensor cores"]
    return []


def check_step_data(spec: TprimatConf, capacity: Optional[float], source: str) -> list[str]:
    """A step's token ids on one data-parallel rank must fit in a device: a global batch beyond that can
    never run, whatever the accumulation (unknown device: the largest memory in the hardware table)."""
    if capacity is None:
        capacity, source = max(d.memory_gib for d in DEVICES.values()), "the largest device in the hardware table"
    tr, dp = spec.training, derived_dp(spec)
    gib = tr.global_batch_size / dp * tr.seq_length * TOKEN_ID_BYTES / 2**30
    if gib <= capacity:
        return []
    return [f"training.global_batch_size={tr.global_batch_size}, training.seq_length={tr.seq_length}, "
            f"parallelism.dp={dp}: one step's token ids alone take {gib:,.0f} GiB per data-parallel rank, more than "
            f"{capacity:.0f} GiB ({source}); lower global_batch_size"]


def check_memory(spec: TprimatConf, hw: DetectedHardware) -> list[str]:
    if check_ranges(spec) or check_layout(spec) or check_batch(spec):  # these divide by sizes the ranges check
        return []
    capacity, source = device_memory(spec, hw)
    too_big = check_step_data(spec, capacity, source)
    if too_big:
        return too_big
    if capacity is None:
        return []
    dp = derived_dp(spec)
    accum = spec.training.global_batch_size // (spec.training.micro_batch_size * dp)
    est = memory.estimate(spec, dp, accum)
    if est.total_gib <= capacity:
        return []
    return [f"model.name={spec.model.name}, parallelism.tp={spec.parallelism.tp}, pp={spec.parallelism.pp}, "
            f"dp={dp}, fsdp={spec.parallelism.fsdp}, zero_stage={spec.parallelism.zero_stage}, "
            f"training.micro_batch_size={spec.training.micro_batch_size}, training.seq_length="
            f"{spec.training.seq_length}, training.activation_checkpointing="
            f"{spec.training.activation_checkpointing}: estimated {est.total_gib:.1f} GiB per device "
            f"(weights {est.weights_gib:.1f}, grads {est.grads_gib:.1f}, optimizer {est.optimizer_gib:.1f}, "
            f"activations {est.activations_gib:.1f}, overhead {est.overhead_gib:.1f}) exceeds {capacity:.1f} GiB "
            f"({source}); shard (parallelism.fsdp / tp / pp), recompute activations or lower micro_batch_size"]
