"""Structured-config schemas registered in Hydra's ConfigStore.

The primary config (conf/config.yaml) starts its defaults list with ``tprimat_schema``, so every YAML
member of every group is merged onto these dataclasses: values are type-checked and unknown keys are
rejected at composition time. Cross-field rules live in ``tprimat.spec.validate``, not here.
Enumerated string values (precision, platform name, ...) are checked there too, so that every rule
violation is reported the same way (one line naming the key, exit code 2).
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass, field, fields, is_dataclass
from typing import Any, List, Optional

MISSING = "???"  # OmegaConf's marker of a required value (Hydra fails composition while it is unset)


class Freezable:
    """Mutable while Hydra/OmegaConf build it; read-only once ``freeze`` has run (the run spec)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise FrozenInstanceError(f"the run spec is frozen: cannot set {type(self).__name__}.{name}")
        object.__setattr__(self, name, value)


def freeze(node: Any) -> Any:
    """Recursively freeze a schema dataclass instance; lists become tuples."""
    if is_dataclass(node):
        for f in fields(node):
            object.__setattr__(node, f.name, freeze(getattr(node, f.name)))
        object.__setattr__(node, "_frozen", True)
    elif isinstance(node, list):
        return tuple(freeze(v) for v in node)
    return node


@dataclass
class TunedConf(Freezable):
    """A platform's own best settings, applied by ``methodology=maximum_performance``."""

    precision: str = "bf16"
    tp: int = 1
    pp: int = 1
    cp: int = 1
    fsdp: bool = False
    activation_checkpointing: str = "none"


@dataclass
class PlatformConf(Freezable):
    name: str = MISSING  # auto | cpu | nvidia | amd
    gpu: Optional[str] = None  # device key in tprimat.spec.hardware (h100, mi300x, ...); detected when null
    devices_per_node: int = 1  # GPUs per node; processes on CPU
    nodes: int = 1
    price_per_device_hour_usd: Optional[float] = None  # overrides the hardware table's reference price
    power_limit_w: Optional[float] = None  # the GPUs' power cap (nvidia-smi -pl); null: the device's TDP
    tuned: TunedConf = field(default_factory=TunedConf)


@dataclass
class ModelConf(Freezable):
    name: str = MISSING
    family: str = MISSING  # llama | qwen2 | mistral | gpt2
    num_layers: int = MISSING
    hidden_size: int = MISSING
    ffn_hidden_size: int = MISSING
    num_attention_heads: int = MISSING
    num_kv_heads: int = MISSING
    head_dim: Optional[int] = None  # defaults to hidden_size / num_attention_heads
    vocab_size: int = MISSING
    max_position_embeddings: int = MISSING
    rope_theta: float = 10000.0
    # Llama 3.1 "llama3" RoPE frequency scaling; null factor = no scaling.
    rope_scaling_factor: Optional[float] = None
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_position: int = 8192
    rms_norm_eps: float = 1e-5  # the norm's epsilon (RMSNorm or LayerNorm)
    qkv_bias: bool = False
    tie_embeddings: bool = False
    norm: str = "rmsnorm"  # rmsnorm | layernorm (GPT-2)
    mlp: str = "swiglu"  # swiglu (gated: gate, up, down) | gelu (GPT-2: up, GELU, down)
    position_embedding: str = "rope"  # rope | learned (GPT-2: a trained table of max_position_embeddings rows)
    linear_bias: bool = False  # every linear layer but the output head carries a bias (GPT-2)
    vocab_pad_multiple: int = 1  # embedding and output rows rounded up to a multiple of this (GPT-2: 64)
    reference: str = ""  # where the architecture numbers come from (e.g. the HF config.json)


def ac_period(value) -> Optional[int]:
    """``training.ac_frequency`` as k (every k-th layer recomputed): an integer k >= 1 or the text "1/k" or "k";
    None when it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 1 else None
    text = str(value).strip().replace(" ", "")
    if text.startswith("1/"):
        text = text[2:]
    return int(text) if text.isdigit() and int(text) >= 1 else None


def padded_vocab(model: ModelConf) -> int:
    """Rows of the embedding and the output head: ``vocab_size`` rounded up to ``vocab_pad_multiple`` (the
    extra rows are never a target; Megatron's ``make_vocab_size_divisible_by``)."""
    multiple = max(1, model.vocab_pad_multiple)
    return -(-model.vocab_size // multiple) * multiple


def full_recompute_layers(training, layers: float) -> float:
    """The layers of a stage full recompute reruns: the first ``training.recompute_num_layers`` (Megatron's block
    method), or every one."""
    return min(layers, training.recompute_num_layers or layers)


def pipeline_split(spec) -> tuple[bool, bool]:
    """(embedding, loss): which of them a Megatron-core pipeline split counts as a layer."""
    par = spec.parallelism
    return par.account_for_embedding_in_pipeline_split, par.account_for_loss_in_pipeline_split


def all_to_all_cp(spec) -> bool:
    """Context parallelism by all-to-alls (parallelism.cp_comm_type=a2a with cp > 1; at cp 1 there is no exchange)."""
    return spec.parallelism.cp > 1 and spec.parallelism.cp_comm_type == "a2a"


def lora_of(spec) -> Optional[LoraConf]:
    """The adapters a spec trains (training.peft=lora), or None when every weight is trained."""
    return spec.training.lora if spec.training.peft == "lora" else None


def head_dim_of(model: ModelConf) -> int:
    """Per-head width: ``model.head_dim`` when set, else hidden_size / num_attention_heads."""
    return model.head_dim or model.hidden_size // model.num_attention_heads


@dataclass
class FrameworkConf(Freezable):
    name: str = MISSING  # a key of tprimat.spec.frameworks.FRAMEWORKS
    # External frameworks (megatron, primus, nemo, torchtitan) run as separate processes:
    path: Optional[str] = None  # their checkout (else MEGATRON_LM_PATH / PRIMUS_PATH / TORCHTITAN_PATH)
    python: str = "python"  # interpreter of their environment (NeMo: its container's python)
    flavour: str = "nemo2"  # nemo: nemo2 (NeMo 2 llm recipes, containers <= 25.x) | bridge (Megatron-Bridge, 26.x);
    # torchtitan: registry (>= 0.3, --module/--config) | toml (0.2.1-0.2.2, --job.config_file)
    recipe: Optional[str] = None  # their own model config (Primus model YAML, NeMo recipe, torchtitan TOML or module:function)
    extra_args: List[str] = field(default_factory=list)  # appended verbatim to their command line
    # nemo flavour bridge with training.peft=lora: the base model's Megatron checkpoint Megatron-Bridge's PEFT loads
    # (its ConfigContainer.validate: "PEFT requires a pretrained checkpoint path")
    pretrained_checkpoint: Optional[str] = None
    timeout_min: float = 240.0  # the run is killed and recorded as failed after this


@dataclass
class MethodologyConf(Freezable):
    name: str = MISSING  # maximum_performance | identical_config
    description: str = ""


@dataclass
class ParallelismConf(Freezable):
    tp: int = 1
    pp: int = 1
    cp: int = 1
    # how context parallelism exchanges its data (Megatron-core's cp_comm_type): p2p, a ring of key/value blocks,
    # each rank attending with its seq/cp queries; a2a, all-to-alls of Q, K, V and the output, each rank attending
    # over the whole sequence with its heads / cp (Ulysses)
    cp_comm_type: str = "p2p"
    dp: Optional[int] = None  # derived from the world size when null
    sequence_parallel: bool = False
    fsdp: bool = False
    zero_stage: int = 0  # 0-3 (DeepSpeed ZeRO / Megatron distributed optimizer)
    pp_schedule: str = "1f1b"  # gpipe | 1f1b
    vp: int = 1  # virtual pipeline stages per rank (Megatron's interleaved 1F1B); 1: not interleaved
    # Megatron-core's uneven pipeline split (its TransformerConfig fields): the embedding (first stage) and the loss
    # (last stage) each count as one layer when the layers are split, so 126 layers make 128 units over pp x vp
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False


@dataclass
class OptimizerConf(Freezable):
    name: str = "adamw"
    lr: float = 3.0e-4
    min_lr: float = 3.0e-5
    warmup_steps: int = 10
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1.0e-8
    grad_clip: float = 1.0  # max global grad norm; 0 disables clipping


@dataclass
class Fp8Conf(Freezable):
    """How fp8 GEMMs are scaled (training.precision=fp8): torchao float8 ``tensorwise`` (one dynamic scale per
    tensor) or ``rowwise`` (per row); Transformer Engine ``delayed`` (amax history) or ``current`` (per-tensor
    current scaling), where transformer_engine is installed."""

    recipe: str = "tensorwise"
    # Transformer Engine's FP8 dot-product attention (its recipe's fp8_dpa, Megatron-core's fp8_dot_product_attention):
    # the attention's matmuls in FP8 too, where the framework's launch takes it (training.precision=fp8)
    attention: bool = False


# LoRA's adapted linear layers, by Megatron-core's module names (NeMo's and Megatron-Bridge's ``target_modules``):
# the attention's fused QKV projection and its output projection, the MLP's first (gate and up) and second layer
LORA_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")


@dataclass
class LoraConf(Freezable):
    """Low-rank adapters (training.peft=lora, Hu et al. 2021): each target's output gains (alpha / rank) * B A x,
    with A (rank x in) and B (out x rank) trained from B = 0 and every weight of the base model frozen. Defaults:
    MLPerf Training's llama2_70b_lora (rank 16, alpha 32, dropout 0.1 on the attention's QKV and output
    projections; NVIDIA's NeMo config ``megatron_gpt_peft_tuning_config.yaml`` in its v4.0-v5.1 submissions)."""

    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.1
    targets: List[str] = field(default_factory=lambda: ["linear_qkv", "linear_proj"])


@dataclass
class TrainingConf(Freezable):
    global_batch_size: int = MISSING
    micro_batch_size: int = MISSING
    seq_length: int = MISSING
    max_steps: int = MISSING  # total optimizer steps, benchmark warm-up included
    optimizer: OptimizerConf = field(default_factory=OptimizerConf)
    precision: str = "bf16"  # bf16 | fp32 | fp8
    activation_checkpointing: str = "none"  # none | full | selective
    ac_frequency: Any = 2  # selective: every k-th layer recomputed; an integer k or "1/k" (2 = every other layer)
    # full, Megatron-core frameworks: the first N layers of each pipeline stage recomputed (Megatron's
    # recompute_method=block, recompute_num_layers=N); null: every layer (uniform, one at a time)
    recompute_num_layers: Optional[int] = None
    compile: bool = False
    # Megatron-core frameworks: accumulate and reduce gradients in fp32 (their default) or bf16 (false: Megatron-LM
    # --grad-reduce-in-bf16, NeMo / Megatron-Bridge grad_reduce_in_fp32=False, as NVIDIA's performance recipes run)
    grad_reduce_in_fp32: bool = True
    compile_mode: str = "default"  # torch.compile mode: default | reduce-overhead | max-autotune | max-autotune-no-cudagraphs
    fp8: Fp8Conf = field(default_factory=Fp8Conf)
    seed: int = 1234
    peft: str = "none"  # none (every weight trained) | lora (training.lora's adapters trained, the base frozen)
    lora: LoraConf = field(default_factory=LoraConf)


@dataclass
class BenchmarkConf(Freezable):
    warmup_steps: int = 2  # measured and recorded, never averaged
    repeats: int = 1  # independent repetitions (fresh model, same seed) in one run
    telemetry: bool = True  # sample power / energy / utilisation during the measured steps
    telemetry_interval_s: float = 0.5
    preflight_file: Optional[str] = None  # a tprimat preflight JSON: measured ceilings for the projection
    projection: str = "roofline"  # roofline | measured-slice: what the result's projection section holds
    init_timeout_s: float = 300.0  # ranks that have not met (or finished the first step) by then: the run fails
    collective_timeout_s: float = 100.0  # after the first step: a collective waiting longer fails the run


@dataclass
class ProfileConf(Freezable):
    """Profiling (README "Profiling"): the PyTorch profiler over measured steps of in-process runs, or nsys /
    rocprof in front of an external framework's command."""

    enabled: bool = False
    steps: Optional[List[int]] = None  # [first, last] 1-based step numbers; null: the first two measured steps
    ranks: List[int] = field(default_factory=lambda: [0])
    tool: str = "torch"  # torch (native) | nsys | rocprof (external frameworks)


@dataclass
class WandbConf(Freezable):
    mode: str = "offline"  # offline | online | disabled
    project: str = "tprimat"
    entity: Optional[str] = None
    group: Optional[str] = None
    tags: List[str] = field(default_factory=list)
    offline_if_unreachable: bool = False  # mode=online and the server cannot be reached at start: go on offline


@dataclass
class LoggingConf(Freezable):
    wandb: WandbConf = field(default_factory=WandbConf)
    log_every_steps: int = 1  # console log interval


@dataclass
class TprimatConf(Freezable):
    platform: PlatformConf = field(default_factory=PlatformConf)
    model: ModelConf = field(default_factory=ModelConf)
    framework: FrameworkConf = field(default_factory=FrameworkConf)
    methodology: MethodologyConf = field(default_factory=MethodologyConf)
    parallelism: ParallelismConf = field(default_factory=ParallelismConf)
    training: TrainingConf = field(default_factory=TrainingConf)
    benchmark: BenchmarkConf = field(default_factory=BenchmarkConf)
    logging: LoggingConf = field(default_factory=LoggingConf)
    profile: ProfileConf = field(default_factory=ProfileConf)
    frameworks: Optional[List[str]] = None  # presets (experiment=nvidia_all | amd_all): the frameworks they sweep
    dry_run: Any = False  # true | false | deep (validate: dry_run's rule)
    run_name: Optional[str] = None
    resume_from: Optional[str] = "outputs"  # sweeps skip points whose identical spec finished ok under here
    overwrite: bool = False  # a launch into a run or sweep directory holding a finished result replaces it
