"""NeMo Framework in its own environment (its packages pin hydra-core<=1.3.2): a generated script run by NeMo's
Python. Two flavours: ``nemo2`` (NeMo 2 ``llm`` recipes run by NeMo-Run, containers up to 25.x) and ``bridge``
(Megatron-Bridge recipes, NeMo Framework 26.x).

Each script sets every hyperparameter on the recipe from one table of ``(spec key, where it is set, where the
framework holds it once finalised, value)`` through ``put``, which refuses a name the recipe's object does not
declare (a dataclass field, a Fiddle argument of the built class): a misspelled or renamed attribute stops the
script before anything runs instead of training the recipe's default. It then prints the values read back from
the recipe object (``TPRIMAT_EFFECTIVE {...}``) for the audit. With ``TPRIMAT_REHEARSE=<file>`` in its
environment the script runs the framework's own finalisation (Megatron-Bridge's ``runtime_config_update``; NeMo
2's Fiddle build of the model, strategy, optimizer, data and precision plugin), reads every setting back from the
finalised objects, counts the parameters of the framework's own model built on the meta device, writes it all to
that file and stops before training (``bench/rehearse.py``)."""

from __future__ import annotations

from pathlib import Path
from pprint import pformat
from typing import Optional

from tprimat.backends.external.base import ExternalBackend, Launch, torchrun
from tprimat.backends.external.megatron import full_recompute
from tprimat.spec.compat import megatron_fp8_recipe
from tprimat.spec.plan import Plan
from tprimat.spec.schema import TprimatConf, all_to_all_cp, head_dim_of

NEMO2_RECIPES = {"llama": "llama31_8b", "llama70b": "llama31_70b", "qwen": "qwen25_7b", "mistral": "mistral_7b"}
BRIDGE_RECIPES = {"llama": ("megatron.bridge.recipes.llama", "llama31_8b_pretrain_config"),
                  "llama70b": ("megatron.bridge.recipes.llama", "llama31_70b_pretrain_config"),
                  "qwen": ("megatron.bridge.recipes.qwen", "qwen25_7b_pretrain_config"),
                  # Megatron-Bridge ships no Mistral recipe: Llama 3 8B's, with every dimension set below
                  "mistral": ("megatron.bridge.recipes.llama", "llama3_8b_pretrain_config")}
FAMILY_BASE = {"llama": "llama", "qwen2": "qwen", "mistral": "mistral"}
# TransformerConfig fields both flavours set on the recipe's model config (NeMo 2 and Megatron-Bridge alike)
ARCHITECTURE = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
                "kv_channels", "rotary_base", "layernorm_epsilon", "vocab_size", "share_embeddings_and_output_weights",
                "add_qkv_bias", "seq_length")
RECOMPUTE = ("recompute_granularity", "recompute_method", "recompute_num_layers")
# Megatron-core's uneven pipeline split (TransformerConfig fields both flavours set on the model config)
PIPELINE_SPLIT = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
# Fusions of a recipe's model that need Transformer Engine's kernels (runtime_config_update refuses
# apply_rope_fusion without TE, Megatron-Bridge 0.3.1): off where the image has no Transformer Engine
TE_FUSIONS = ("apply_rope_fusion", "gradient_accumulation_fusion", "bias_activation_fusion", "bias_dropout_fusion",
              "masked_softmax_fusion", "persist_layer_norm", "cross_entropy_loss_fusion")


def values(spec: TprimatConf) -> dict:
    m, tr, opt, par = spec.model, spec.training, spec.training.optimizer, spec.parallelism
    return {"num_layers": m.num_layers, "hidden_size": m.hidden_size, "ffn_hidden_size": m.ffn_hidden_size,
            "num_attention_heads": m.num_attention_heads, "num_query_groups": m.num_kv_heads,
            "kv_channels": head_dim_of(m), "rotary_base": int(m.rope_theta),
            "layernorm_epsilon": m.rms_norm_eps, "vocab_size": m.vocab_size,
            "share_embeddings_and_output_weights": m.tie_embeddings, "add_qkv_bias": m.qkv_bias,
            "seq_length": tr.seq_length, "max_steps": tr.max_steps, "global_batch_size": tr.global_batch_size,
            "micro_batch_size": tr.micro_batch_size, "lr": opt.lr, "min_lr": opt.min_lr,
            "warmup_steps": opt.warmup_steps, "weight_decay": opt.weight_decay, "adam_beta1": opt.beta1,
            "adam_beta2": opt.beta2, "adam_eps": opt.eps, "clip_grad": opt.grad_clip, "tp": par.tp, "pp": par.pp,
            "cp": par.cp, "sequence_parallel": par.sequence_parallel, "precision": tr.precision, "seed": tr.seed,
            "fp8_recipe": megatron_fp8_recipe(spec),
            "vp": par.vp if par.vp > 1 else None, "megatron_fsdp": par.fsdp,
            "distributed_optimizer": par.zero_stage >= 1 or par.fsdp, "grad_reduce_in_fp32": tr.grad_reduce_in_fp32,
            **recompute_of(tr.activation_checkpointing, tr.recompute_num_layers),
            **{key: getattr(par, key) for key in PIPELINE_SPLIT},
            "devices_per_node": spec.platform.devices_per_node, "nodes": spec.platform.nodes, "peft": tr.peft}


def recompute_of(mode: str, layers=None) -> dict:
    """TransformerConfig's recompute fields for training.activation_checkpointing and recompute_num_layers (as
    Megatron-LM's CLI sets them)."""
    return {"none": {"recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None},
            "full": full_recompute(layers),
            "selective": {"recompute_granularity": "selective", "recompute_method": None,
                          "recompute_num_layers": None}}[mode]


def bridge_settings(spec: TprimatConf) -> list[tuple]:
    """(spec key, where the script sets it on the ConfigContainer, where it is read back after
    ``runtime_config_update``, value). The mixed-precision recipe's ``grad_reduce_in_fp32`` is set on the recipe
    itself: ``runtime_config_update`` copies the recipe's value over the DDP config's (Megatron-Bridge 0.3.1-0.6.2)."""
    v = values(spec)
    fp8 = spec.training.precision == "fp8"
    rows = [(key, f"model.{key}", f"model.{key}", v[key]) for key in ARCHITECTURE]
    rows += [("vocab_size", "tokenizer.vocab_size", "tokenizer.vocab_size", v["vocab_size"]),
             ("tp", "model.tensor_model_parallel_size", "model.tensor_model_parallel_size", v["tp"]),
             ("pp", "model.pipeline_model_parallel_size", "model.pipeline_model_parallel_size", v["pp"]),
             ("cp", "model.context_parallel_size", "model.context_parallel_size", v["cp"]),
             ("sequence_parallel", "model.sequence_parallel", "model.sequence_parallel", v["sequence_parallel"]),
             ("vp", "model.virtual_pipeline_model_parallel_size", "model.virtual_pipeline_model_parallel_size",
              v["vp"])]
    rows += [(key, f"model.{key}", f"model.{key}", v[key]) for key in (*RECOMPUTE, *PIPELINE_SPLIT)]
    rows += cp_comm_rows(spec, "model")
    if v["megatron_fsdp"]:  # runtime_config_update: "Megatron FSDP only supports fsdp_dtensor checkpoint format"
        rows.append(("ckpt_format", "checkpoint.ckpt_format", "checkpoint.ckpt_format", "fsdp_dtensor"))
    rows += [("megatron_fsdp", "ddp.use_megatron_fsdp", "ddp.use_megatron_fsdp", v["megatron_fsdp"]),
             ("distributed_optimizer", "ddp.use_distributed_optimizer", "ddp.use_distributed_optimizer",
              v["distributed_optimizer"]),
             ("seq_length", "dataset.seq_length", "dataset.seq_length", v["seq_length"]),
             ("max_steps", "train.train_iters", "train.train_iters", v["max_steps"]),
             ("global_batch_size", "train.global_batch_size", "train.global_batch_size", v["global_batch_size"]),
             ("micro_batch_size", "train.micro_batch_size", "train.micro_batch_size", v["micro_batch_size"]),
             ("eval_iters", "validation.eval_iters", "validation.eval_iters", 0)]
    rows += [(key, f"optimizer.{name}", f"optimizer.{name}", v[key]) for key, name in
             (("lr", "lr"), ("min_lr", "min_lr"), ("weight_decay", "weight_decay"), ("clip_grad", "clip_grad"),
              ("adam_beta1", "adam_beta1"), ("adam_beta2", "adam_beta2"), ("adam_eps", "adam_eps"))]
    rows += [("warmup_steps", "scheduler.lr_warmup_iters", "scheduler.lr_warmup_iters", v["warmup_steps"]),
             ("lr_decay_iters", "scheduler.lr_decay_iters", "scheduler.lr_decay_iters", v["max_steps"]),
             ("lr_decay_style", "scheduler.lr_decay_style", "scheduler.lr_decay_style", "cosine"),
             ("log_interval", "logger.log_interval", "logger.log_interval", 1),
             ("log_throughput", "logger.log_throughput", "logger.log_throughput", True),
             ("seed", "rng.seed", "rng.seed", v["seed"]),
             ("grad_reduce_in_fp32", "mixed_precision.grad_reduce_in_fp32", "ddp.grad_reduce_in_fp32",
              v["grad_reduce_in_fp32"]),
             ("bf16", None, "model.bf16", True), ("fp8", None, "model.fp8", "hybrid" if fp8 else None)]
    return rows + fp8_rows(spec, "mixed_precision", "model") + lora_rows(spec)


def fp8_rows(spec: TprimatConf, precision: Optional[str], read: str) -> list[tuple]:
    """Transformer Engine's scaling (Megatron's fp8_recipe, read back from ``read``), every layer in fp8: the
    current-scaling presets of NeMo 2 and Megatron-Bridge keep the first and last layers in bf16
    (``first_last_layers_bf16=True``), which their performance scripts turn off (Megatron-Bridge
    scripts/performance/utils/precision.py, v0.2.0 to v0.6.0) and so does tprimat: the spec trains them in fp8.
    training.fp8.attention: the mixed precision's ``fp8_dot_product_attention``, Transformer Engine's fp8_dpa."""
    recipe = values(spec)["fp8_recipe"]
    if recipe is None:
        return []
    attention = [("fp8_dot_product_attention", precision and f"{precision}.fp8_dot_product_attention",
                  f"{read}.fp8_dot_product_attention", True)] if spec.training.fp8.attention else []
    return [("fp8_recipe", None, f"{read}.fp8_recipe", recipe),
            ("first_last_layers_bf16", precision and f"{precision}.first_last_layers_bf16",
             f"{read}.first_last_layers_bf16", False), *attention]


def cp_comm_rows(spec: TprimatConf, model: str) -> list[tuple]:
    """parallelism.cp_comm_type=a2a on the model's TransformerConfig (``cp_comm_type``; its default, p2p, unsaid)."""
    if not all_to_all_cp(spec):
        return []
    return [("cp_comm_type", f"{model}.cp_comm_type", f"{model}.cp_comm_type", "a2a")]


def lora_rows(spec: TprimatConf) -> list[tuple]:
    """training.lora on Megatron-Bridge's LoRA (``cfg.peft``, the script sets one first) and the base checkpoint its
    PEFT loads; Megatron-core's module names are Bridge's own ``target_modules``."""
    if spec.training.peft != "lora":
        return []
    lora = spec.training.lora
    alpha = int(lora.alpha) if float(lora.alpha).is_integer() else lora.alpha  # Bridge's field is an int
    return [("lora_rank", "peft.dim", "peft.dim", lora.rank), ("lora_alpha", "peft.alpha", "peft.alpha", alpha),
            ("lora_dropout", "peft.dropout", "peft.dropout", lora.dropout),
            ("lora_dropout_position", "peft.dropout_position", "peft.dropout_position", "pre"),
            ("lora_targets", "peft.target_modules", "peft.target_modules", list(lora.targets)),
            ("pretrained_checkpoint", "checkpoint.pretrained_checkpoint", "checkpoint.pretrained_checkpoint",
             spec.framework.pretrained_checkpoint)]


def nemo2_settings(spec: TprimatConf) -> list[tuple]:
    """(spec key, where the script sets it on the NeMo 2 recipe, where it is read back from the built objects,
    value). Read paths start at the built object: ``model``, ``strategy``, ``optim``, ``data``, ``plugin``,
    ``trainer`` (the recipe's Trainer arguments)."""
    v = values(spec)
    rows = [(key, f"model.config.{key}", f"model.config.{key}", v[key]) for key in ARCHITECTURE]
    rows += [(key, f"model.config.{key}", f"model.config.{key}", v[key]) for key in (*RECOMPUTE, *PIPELINE_SPLIT)]
    rows += cp_comm_rows(spec, "model.config")
    rows += [("max_steps", "trainer.max_steps", "trainer.max_steps", v["max_steps"]),
             ("log_every_n_steps", "trainer.log_every_n_steps", "trainer.log_every_n_steps", 1),
             ("val_check_interval", "trainer.val_check_interval", "trainer.val_check_interval", v["max_steps"] + 1),
             ("limit_val_batches", "trainer.limit_val_batches", "trainer.limit_val_batches", 0),
             ("tp", "trainer.strategy.tensor_model_parallel_size", "strategy.tensor_model_parallel_size", v["tp"]),
             ("pp", "trainer.strategy.pipeline_model_parallel_size", "strategy.pipeline_model_parallel_size",
              v["pp"]),
             ("cp", "trainer.strategy.context_parallel_size", "strategy.context_parallel_size", v["cp"]),
             ("sequence_parallel", "trainer.strategy.sequence_parallel", "strategy.sequence_parallel",
              v["sequence_parallel"]),
             ("vp", "trainer.strategy.virtual_pipeline_model_parallel_size",
              "strategy.virtual_pipeline_model_parallel_size", v["vp"]),
             ("distributed_optimizer", "trainer.strategy.ddp.use_distributed_optimizer",
              "strategy.ddp_config.use_distributed_optimizer", v["distributed_optimizer"]),
             ("grad_reduce_in_fp32", "trainer.plugins.grad_reduce_in_fp32", "plugin.dtype_config.grad_reduce_in_fp32",
              v["grad_reduce_in_fp32"])]
    if v["megatron_fsdp"]:
        rows.append(("megatron_fsdp", "trainer.strategy.fsdp", "strategy._fsdp", "megatron"))
    rows += [(key, f"optim.config.{key}", f"optim.config.{key}", v[key]) for key in
             ("lr", "weight_decay", "clip_grad", "adam_beta1", "adam_beta2", "adam_eps")]
    rows += [("warmup_steps", "optim.lr_scheduler.warmup_steps", "optim.lr_scheduler.warmup_steps",
              v["warmup_steps"]),
             ("min_lr", "optim.lr_scheduler.min_lr", "optim.lr_scheduler.min_lr", v["min_lr"]),
             ("lr_decay_steps", "optim.lr_scheduler.max_steps", "optim.lr_scheduler.max_steps", v["max_steps"]),
             ("seq_length", None, "data.seq_length", v["seq_length"]),
             ("global_batch_size", None, "data.global_batch_size", v["global_batch_size"]),
             ("micro_batch_size", None, "data.micro_batch_size", v["micro_batch_size"]),
             ("bf16", None, "plugin.dtype_config.bf16", True),
             ("fp8", None, "plugin.dtype_config.fp8", "hybrid" if spec.training.precision == "fp8" else None)]
    return rows + fp8_rows(spec, "trainer.plugins", "plugin.dtype_config") + nemo2_lora_rows(spec)


def nemo2_lora_rows(spec: TprimatConf) -> list[tuple]:
    """training.lora on NeMo 2's fine-tuning recipe (``llm.finetune``): its LoRA (``recipe.peft``), the optimizer's
    own distributed-optimizer switch (the recipe turns it off under LoRA), the base checkpoint it restores
    (``recipe.resume.restore_config.path``) and the data's tokenizer (mock tokens of the model's vocabulary)."""
    if spec.training.peft != "lora":
        return []
    distributed = spec.parallelism.zero_stage >= 1 or spec.parallelism.fsdp
    return [*[row for row in lora_rows(spec) if row[0].startswith("lora_")],  # the same LoRA fields as Bridge's
            ("optimizer_distributed", "optim.config.use_distributed_optimizer", "optim.config.use_distributed_optimizer",
             distributed),
            ("pretrained_checkpoint", "resume.restore_config.path", "resume.restore_config.path",
             spec.framework.pretrained_checkpoint),
            ("tokenizer", "tokenizer", "tokenizer", "data")]


def table(rows: list[tuple]) -> str:
    return "[\n" + "".join(f"    {row!r},\n" for row in rows) + "]"


# Shared by both scripts: put() refuses a name the object does not declare; the rehearsal's record.
PUT = '''

def declares(obj, name):
    """A dataclass field, a property with a setter, an argument the Fiddle config's class names in its signature
    (not one its **kwargs would swallow), or an attribute that exists: never a new attribute nothing reads."""
    fn = getattr(obj, "__fn_or_cls__", None)
    if fn is not None:
        params = inspect.signature(fn).parameters
        return name in params and params[name].kind not in (params[name].VAR_KEYWORD, params[name].VAR_POSITIONAL)
    alias = getattr(type(obj), name, None)
    if isinstance(alias, property):  # a settable alias (GPTDatasetConfig.seq_length -> sequence_length)
        return alias.fset is not None
    if dataclasses.is_dataclass(obj):
        return name in {f.name for f in dataclasses.fields(obj)}
    return hasattr(obj, name)


def resolve(root, path):
    *parents, name = path.split(".")
    for part in parents:
        root = getattr(root, part)
    return root, name


def put(root, path, value):
    obj, name = resolve(root, path)
    if not declares(obj, name):
        raise SystemExit(f"tprimat: {VERSION}: {type(obj).__name__} declares no setting {name!r} ({path}): it "
                         "would be ignored and the recipe's default trained; fix the generator or refuse the setting")
    setattr(obj, name, value)


def rehearsal_record(root, params, error):
    """Every setting read back from the finalised objects, the framework's own parameter count, the version."""
    rows = []
    for key, _, where, value in SETTINGS:
        try:
            obj, name = resolve(root, where)
            got = getattr(obj, name)
        except AttributeError as exc:
            got = f"<not readable: {str(exc)[:160]}>"
        scalar = isinstance(got, (bool, int, float, str, type(None)))
        if isinstance(got, (list, tuple)) and all(isinstance(v, (bool, int, float, str, type(None))) for v in got):
            got, scalar = list(got), True  # a list of names (LoRA's target_modules) compared as one
        rows.append({"key": key, "where": where, "spec": value, "framework": got if scalar else str(got)})
    with open(os.environ["TPRIMAT_REHEARSE"], "w") as f:
        json.dump({"framework": VERSION, "settings": rows, "params": params, "error": error}, f, indent=1)


def meta_parameter_count(config, build):
    """The framework's own model for this config, one rank and no model parallelism, built on the meta device."""
    import tempfile

    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/rendezvous", rank=0, world_size=1)
        parallel_state.initialize_model_parallel()
    # the layers are sized by the process groups (one rank); tensor_model_parallel_size is kept, so that a
    # vocabulary the framework pads is padded for the launch's TP, as the run pads it
    one = dataclasses.replace(config, pipeline_model_parallel_size=1,
                              context_parallel_size=1, sequence_parallel=False,
                              virtual_pipeline_model_parallel_size=None, use_cpu_initialization=True,
                              perform_initialization=False)
    with torch.device("meta"):
        model = build(one)
    return sum(p.numel() for p in model.parameters())


def fusions_off(root, path):
    """An image without Transformer Engine: the model config's fusions that need its kernels, off."""
    config = resolve(root, path + ".")[0]
    off = [name for name in TE_FUSIONS if declares(config, name) and getattr(config, name)]
    for name in off:
        put(root, f"{path}.{name}", False)
    return off


def rehearse(stage, finalise, fallback, config_of, build):
    """The framework's own finalisation, every setting read back from what it returns (from ``fallback`` where it
    refuses, its refusal being the finding), then the framework's own model on the meta device."""
    try:
        root = finalise()
    except Exception as exc:
        rehearsal_record(fallback, None, f"{stage}: {type(exc).__name__}: {exc}")
        return
    try:
        params, error = meta_parameter_count(config_of(root), lambda config: build(config, root)), None
    except Exception as exc:
        params, error = None, f"model build: {type(exc).__name__}: {exc}"
    rehearsal_record(root, params, error)
'''

HEADER = '''"""Generated by tprimat: {title}, every hyperparameter set explicitly (docs/frameworks.md)."""
import dataclasses
import importlib.util
import inspect
import json
import os
from importlib.metadata import version

HAVE_TE = importlib.util.find_spec("transformer_engine") is not None  # asked before the framework imports anything
'''

NEMO2_BODY = '''
if V["peft"] == "lora":  # NeMo 2 takes LoRA in llm.finetune: the model's fine-tuning recipe, its recipe.peft set below
    recipe = llm.{recipe}.finetune_recipe(name="tprimat", num_nodes=V["nodes"], num_gpus_per_node=V["devices_per_node"],
                                          peft_scheme="lora", packed_sequence=False)
else:
    recipe = llm.{recipe}.pretrain_recipe(name="tprimat", num_nodes=V["nodes"], num_gpus_per_node=V["devices_per_node"])
FP8_PRESETS = {{"tensorwise": bf16_with_fp8_current_scaling_mixed, "delayed": bf16_with_fp8_mixed}}
recipe.trainer.plugins = FP8_PRESETS[V["fp8_recipe"]]() if V["precision"] == "fp8" else bf16_mixed()
# Mock tokens from the model's own vocabulary (NeMo's NullTokenizer adds one id for end-of-document); the default
# GPT-2 tokenizer would draw ids up to 50,257 whatever the model's vocabulary.
recipe.data = run.Config(llm.MockDataModule, seq_length=V["seq_length"], global_batch_size=V["global_batch_size"],
                         micro_batch_size=V["micro_batch_size"],
                         tokenizer=run.Config(NullTokenizer, vocab_size=V["vocab_size"] - 1))
if recipe.trainer.strategy.ddp == "megatron":  # Qwen 2.5's recipe: MegatronStrategy builds this same config
    recipe.trainer.strategy.ddp = run.Config(DistributedDataParallelConfig, check_for_nan_in_grad=True)
for key, where, _, value in SETTINGS:
    if where:
        put(recipe, where, value)
recipe.log.ckpt = None
if not HAVE_TE:
    print(f"tprimat: no Transformer Engine here: {{', '.join(fusions_off(recipe, 'model.config')) or 'no fusion'}} off",
          flush=True)


def build_all():
    """NeMo 2's own objects, built by Fiddle as NeMo-Run builds them."""
    import types

    import fiddle as fdl
    lora = dict(peft=fdl.build(recipe.peft), resume=fdl.build(recipe.resume), tokenizer=recipe.tokenizer) \
        if V["peft"] == "lora" else {{}}
    return types.SimpleNamespace(model=fdl.build(recipe.model), strategy=fdl.build(recipe.trainer.strategy),
                                 optim=fdl.build(recipe.optim), data=fdl.build(recipe.data),
                                 plugin=fdl.build(recipe.trainer.plugins), trainer=recipe.trainer, **lora)


if os.environ.get("TPRIMAT_REHEARSE"):
    rehearse("fiddle build", build_all, recipe, lambda built: built.model.config,
             lambda config, built: config.configure_model(built.data.tokenizer))
    raise SystemExit(0)
opt, sched, strategy = recipe.optim.config, recipe.optim.lr_scheduler, recipe.trainer.strategy
print("TPRIMAT_EFFECTIVE " + json.dumps({{
    "lr": opt.lr, "min_lr": sched.min_lr, "warmup_steps": sched.warmup_steps,
    "weight_decay": opt.weight_decay, "beta1": opt.adam_beta1, "beta2": opt.adam_beta2,
    "global_batch_size": recipe.data.global_batch_size, "micro_batch_size": recipe.data.micro_batch_size,
    "seq_length": recipe.data.seq_length, "tp": strategy.tensor_model_parallel_size,
    "pp": strategy.pipeline_model_parallel_size, "cp": strategy.context_parallel_size,
    "recompute": recipe.model.config.recompute_granularity or "none",
    "fp8_recipe": recipe.trainer.plugins.fp8_recipe if recipe.trainer.plugins.fp8 else None}}), flush=True)
run.run(recipe, executor=run.LocalExecutor(ntasks_per_node=V["devices_per_node"], launcher="torchrun"))
'''

BRIDGE_BODY = '''
cfg = recipe_fn()
# the recipe's grad_reduce_in_fp32 is the mixed-precision recipe's: runtime_config_update copies it over the DDP's
cfg.mixed_precision = get_mixed_precision_config(PRECISION)
if not declares(cfg, "validation"):  # Megatron-Bridge 0.3.x: eval_iters is the TrainingConfig's
    SETTINGS = [(k, s and s.replace("validation.", "train."), r.replace("validation.", "train."), v)
                for k, s, r, v in SETTINGS]
if declares(cfg.tokenizer, "use_tokenizer_vocab_size"):  # Megatron-Bridge 0.6: its pretrain recipes take the
    # tokenizer's vocabulary and pad it to 128 x TP in setup(); the model's own, as its performance recipes set it
    SETTINGS = [*SETTINGS, ("vocab_from_tokenizer", "tokenizer.use_tokenizer_vocab_size",
                            "tokenizer.use_tokenizer_vocab_size", False)]
if V["peft"] == "lora":  # an adapter config to set: the recipe has none (cfg.peft is None)
    from megatron.bridge.peft.lora import LoRA
    cfg.peft = LoRA()
for key, where, _, value in SETTINGS:
    if where:
        put(cfg, where, value)
if not HAVE_TE:
    off = fusions_off(cfg, "model")
    from megatron.bridge.models.gpt_provider import local_layer_spec  # its default spec is Transformer Engine's
    put(cfg, "model.transformer_layer_spec", local_layer_spec)
    print(f"tprimat: no Transformer Engine here: local layers, {{', '.join(off) or 'no fusion'}} off", flush=True)


def finalise():
    """What pretrain() runs first, at the launch's world size (Megatron-Bridge's data-parallel size)."""
    from megatron.bridge.training import setup
    from megatron.bridge.training.config import runtime_config_update
    os.environ.setdefault("WORLD_SIZE", str(V["nodes"] * V["devices_per_node"]))
    runtime_config_update(cfg)
    # then setup() sizes the model's vocabulary from its tokenizer's (Bridge's null tokenizer: vocab_size ids)
    own = inspect.signature(setup._validate_and_set_vocab_size).parameters
    cfg.model.vocab_size, cfg.model.should_pad_vocab = setup._validate_and_set_vocab_size(
        cfg.model.vocab_size, cfg.tokenizer.vocab_size,
        **({{"use_tokenizer_vocab_size": cfg.tokenizer.use_tokenizer_vocab_size}}
           if "use_tokenizer_vocab_size" in own else {{}}))
    return cfg


def build_model(provider, _):
    """The provider's own provide(), as provide_distributed_model calls it, with the model-parallel groups."""
    from megatron.core.process_groups_config import ProcessGroupCollection
    if hasattr(provider, "finalize"):
        provider.finalize()
    provider._pg_collection = ProcessGroupCollection.use_mpu_process_groups()
    return provider.provide()


if os.environ.get("TPRIMAT_REHEARSE"):
    rehearse("runtime_config_update", finalise, cfg, lambda c: c.model, build_model)
    raise SystemExit(0)
print("TPRIMAT_EFFECTIVE " + json.dumps({{
    "lr": cfg.optimizer.lr, "min_lr": cfg.optimizer.min_lr, "warmup_steps": cfg.scheduler.lr_warmup_iters,
    "weight_decay": cfg.optimizer.weight_decay, "beta1": cfg.optimizer.adam_beta1, "beta2": cfg.optimizer.adam_beta2,
    "global_batch_size": cfg.train.global_batch_size, "micro_batch_size": cfg.train.micro_batch_size,
    "seq_length": cfg.dataset.seq_length, "tp": cfg.model.tensor_model_parallel_size,
    "pp": cfg.model.pipeline_model_parallel_size, "cp": cfg.model.context_parallel_size,
    "recompute": cfg.model.recompute_granularity or "none",
    "fp8_recipe": cfg.mixed_precision.fp8_recipe if cfg.mixed_precision.fp8 else None}}), flush=True)
from megatron.bridge.training.gpt_step import forward_step  # noqa: E402

if V["peft"] == "lora":  # the base loaded from checkpoint.pretrained_checkpoint, frozen; the adapters trained
    from megatron.bridge.training.finetune import finetune
    finetune(cfg, forward_step)
else:
    from megatron.bridge.training.pretrain import pretrain
    pretrain(cfg, forward_step)
'''


def nemo2_script(spec: TprimatConf) -> str:
    recipe = spec.framework.recipe or NEMO2_RECIPES.get(spec.model.name) or NEMO2_RECIPES[FAMILY_BASE[spec.model.family]]
    imports = ("\nimport nemo_run as run\nfrom megatron.core.distributed import DistributedDataParallelConfig\n"
               "from nemo.collections import llm\n"
               "from nemo.collections.common.tokenizers.null_tokenizer import NullTokenizer\n"
               "from nemo.collections.llm.recipes.precision.mixed_precision import bf16_mixed, bf16_with_fp8_mixed, "
               "bf16_with_fp8_current_scaling_mixed\n\n"
               'VERSION = "nemo_toolkit " + version("nemo_toolkit")\n')
    return (HEADER.format(title=f"NeMo 2 llm recipe {recipe}") + imports
            + f"V = {pformat(values(spec), sort_dicts=False)}\nTE_FUSIONS = {TE_FUSIONS!r}\n"
            + f"SETTINGS = {table(nemo2_settings(spec))}\n" + PUT
            + NEMO2_BODY.format(recipe=recipe))


def bridge_script(spec: TprimatConf) -> str:
    module, fn = BRIDGE_RECIPES.get(spec.model.name) or BRIDGE_RECIPES[FAMILY_BASE[spec.model.family]]
    if spec.framework.recipe:
        module, _, fn = spec.framework.recipe.rpartition(".")
    precision = {None: "bf16_mixed", "delayed": "bf16_with_fp8_delayed_scaling_mixed",
                 "tensorwise": "bf16_with_fp8_current_scaling_mixed"}[values(spec)["fp8_recipe"]]
    imports = (f"\nfrom megatron.bridge.training.mixed_precision import get_mixed_precision_config\n"
               f"from {module} import {fn} as recipe_fn\n\n"
               'VERSION = "megatron-bridge " + version("megatron-bridge")\n')
    return (HEADER.format(title=f"Megatron-Bridge recipe {module}.{fn}") + imports
            + f"V = {pformat(values(spec), sort_dicts=False)}\nPRECISION = {precision!r}\n"
            + f"TE_FUSIONS = {TE_FUSIONS!r}\n"
            + f"SETTINGS = {table(bridge_settings(spec))}\n" + PUT + BRIDGE_BODY.format())


def lora_problems(spec: TprimatConf) -> list[str]:
    """LoRA fine-tunes a base checkpoint under both flavours: Megatron-Bridge's cfg.peft, NeMo 2's llm.finetune."""
    if spec.training.peft == "none" or spec.framework.pretrained_checkpoint:
        return []
    if spec.framework.flavour == "bridge":
        return ["training.peft=lora, framework.pretrained_checkpoint=null: Megatron-Bridge's PEFT fine-tunes a base "
                "checkpoint (its ConfigContainer.validate: 'PEFT requires a pretrained checkpoint path'); name the "
                "base model's Megatron checkpoint directory"]
    return ["training.peft=lora, framework.pretrained_checkpoint=null: NeMo 2's llm.finetune restores a base checkpoint "
            "(its recipe's resume.restore_config.path, nemo://<model> otherwise, which needs a conversion first); name "
            "the base model's NeMo 2 checkpoint directory"]


class NemoBackend(ExternalBackend):
    name = "nemo"
    path_env = "NEMO_PATH"
    needs_checkout = False  # runs with NeMo's own interpreter (framework.python)

    @property
    def log_format(self) -> str:  # noqa: D401 - set per run in launch()
        return self._format

    _format = "nemo"

    def check(self, spec: TprimatConf, plan: Plan) -> list[str]:
        if spec.platform.name == "cpu":
            return ["framework.name=nemo, platform.name=cpu: NeMo trains on NVIDIA or AMD GPUs"]
        if spec.framework.flavour not in ("nemo2", "bridge"):
            return [f"framework.flavour={spec.framework.flavour}: must be nemo2 or bridge"]
        return lora_problems(spec)  # runs with NeMo's own interpreter (framework.python); no checkout needed

    def launch(self, spec: TprimatConf, plan: Plan, launch_dir: Path) -> Launch:
        script = launch_dir / "nemo_pretrain.py"
        if spec.framework.flavour == "bridge":
            self._format = "megatron"  # Megatron-Bridge prints Megatron-LM's iteration lines
            return Launch([*torchrun(spec), str(script), *spec.framework.extra_args], cwd=str(launch_dir),
                          files={"nemo_pretrain.py": bridge_script(spec)})
        self._format = "nemo"
        return Launch([spec.framework.python, str(script), *spec.framework.extra_args], cwd=str(launch_dir),
                      files={"nemo_pretrain.py": nemo2_script(spec)})


BACKEND = NemoBackend()
