"""FLOPs and bytes of every operation of one micro batch, traced over fake tensors (no memory, no device):
the input of the step-time projection (``tprimat.spec.projection``).

One decoder layer of the native model (the spec's dimensions, its parameters in the compute dtype, seq/cp
tokens) and the output head with its loss run forward and backward under a ``TorchDispatchMode`` that sees
each ATen operation: FLOPs from ``torch.utils.flop_counter``'s own formulas, bytes from the operation's input
and output tensors (views move none). Attention is the fused kernel's call; its FLOPs are counted as
flash-attention kernels do the work: causal masking halves them, the backward is 2.5x the forward
(recomputing the scores; Dao, FlashAttention-2, section 4.1).
"""

from __future__ import annotations

import contextlib

from tprimat.spec import keeps
from tprimat.spec.frameworks import model_as_built
from tprimat.spec.projection import OpCost, Work
from tprimat.spec.schema import TprimatConf, lora_of

ATTENTION = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")


def tensor_bytes(values) -> int:
    import torch

    total = 0
    for v in values:
        if isinstance(v, torch.Tensor):
            total += v.numel() * v.element_size()
        elif isinstance(v, (list, tuple)):
            total += tensor_bytes(v)
    return total


def attention_flops(q, k, causal: bool = True) -> float:
    """Forward FLOPs of fused attention: QK^T and PV, 2 FLOPs per multiply-add, halved when causal."""
    bsz, heads, s_q, head_dim = q.shape
    return 4.0 * bsz * heads * s_q * k.shape[-2] * head_dim * (0.5 if causal else 1.0)


class OpRecorder:
    """A dispatch mode recording OpCost per ATen call, into ``self.ops`` (switchable between phases)."""

    def __new__(cls):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.flop_counter import flop_registry

        class Recorder(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.ops: list[OpCost] = []

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                returns = func._schema.returns
                if func.namespace != "aten" or (returns and returns[0].alias_info is not None):
                    return out  # views, prims and metadata move no data
                name = func._overloadpacket.__name__
                moved = tensor_bytes(args) + tensor_bytes(kwargs.values()) + tensor_bytes([out])
                if name in ATTENTION:
                    self.ops.append(OpCost("attention", attention_flops(args[0], args[1]), moved))
                elif name.removesuffix("_backward") in ATTENTION:
                    self.ops.append(OpCost("attention", 2.5 * attention_flops(args[1], args[2]), moved))
                elif func._overloadpacket in flop_registry:
                    counted = flop_registry[func._overloadpacket](*args, **kwargs, out_val=out)
                    self.ops.append(OpCost("matmul", float(counted), moved))
                else:
                    self.ops.append(OpCost("memory", 0.0, moved))
                return out

        return Recorder()


TRACED: dict = {}  # (model, local tokens, weight dtype, autocast) -> Work: what a trace depends on, nothing else
TRACED_KEEP = 64  # traces kept per process (plan --best projects ~100 layouts of a handful of shapes)


def trace_work(spec: TprimatConf) -> Work:
    """One micro batch of the spec's model at its local shapes (seq/cp tokens, before tensor parallelism).
    Layouts that share those (tp, pp, dp and the framework change only how the work is split and scheduled)
    share one trace: ``Work`` and its ``OpCost`` are read, never changed."""
    cfg, tr = model_as_built(spec), spec.training  # the vocabulary as the framework pads it (its head's work)
    # as the backends hold them: fp32 weights under bf16 autocast, or bf16 weights (FSDP2's mixed precision
    # policy, frameworks with a bf16 model copy)
    autocast = tr.precision != "fp32" and not spec.parallelism.fsdp and keeps.of(spec).weight_bytes == 4
    tokens = (tr.micro_batch_size, tr.seq_length // spec.parallelism.cp)
    fp32_weights = tr.precision == "fp32" or autocast
    lora = lora_of(spec)
    key = (repr(cfg), tokens, fp32_weights, autocast, repr(lora))
    if key not in TRACED:
        if len(TRACED) >= TRACED_KEEP:
            TRACED.pop(next(iter(TRACED)))  # the oldest shape
        TRACED[key] = trace_model(cfg, tokens, fp32_weights, autocast, lora)
    return TRACED[key]


def trace_model(cfg, tokens: tuple[int, int], fp32_weights: bool, autocast: bool, lora=None) -> Work:
    """``lora`` (a ``LoraConf``): the layer built with its adapters and every base weight frozen, so that the
    backward traced is the one autograd runs (no weight gradient of a frozen weight)."""
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tprimat.backends.native.lora import freeze_base
    from tprimat.backends.native.model import Block, head_dim_of, make_norm, rope_cache, rope_frequencies
    from tprimat.spec.schema import padded_vocab

    dtype = torch.float32 if fp32_weights else torch.bfloat16
    cast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if autocast else contextlib.nullcontext
    vocab = padded_vocab(cfg)
    with torch.device("meta"):
        block = Block(cfg, head_dim_of(cfg), lora).to(dtype)
        norm, output = make_norm(cfg).to(dtype), torch.nn.Linear(cfg.hidden_size, vocab, bias=False).to(dtype)
        embedding = torch.nn.Embedding(vocab, cfg.hidden_size).to(dtype)
    if lora is not None:
        for module in (block, norm, output, embedding):
            freeze_base(module)
    parts: dict = {}
    with FakeTensorMode(allow_non_fake_inputs=True):
        for module in (block, norm, output, embedding):
            module.to_empty(device="cpu")
        cos, sin = (None, None) if cfg.position_embedding == "learned" else \
            rope_cache(rope_frequencies(cfg, head_dim_of(cfg)), tokens[1])
        x = torch.randn(*tokens, cfg.hidden_size, dtype=dtype, requires_grad=True)
        parts["layer"] = traced(lambda: block(x, cos, sin), cast)
        targets = torch.randint(0, cfg.vocab_size, tokens)
        parts["head"] = traced(lambda: F.cross_entropy(output(norm(x)).float().reshape(-1, vocab),
                                                       targets.reshape(-1)), cast)
        ids = torch.randint(0, cfg.vocab_size, tokens)
        parts["embedding"] = traced(lambda: embedding(ids), cast)
    return Work(parts)


def traced(forward, cast) -> dict:
    import torch

    recorder = OpRecorder()
    with recorder:
        with cast():
            out = forward()
        fwd = list(recorder.ops)
        recorder.ops.clear()
        if out.requires_grad:  # a frozen embedding (LoRA) has no backward
            out.backward(torch.ones_like(out)) if out.dim() else out.backward()
    return {"fwd": fwd, "bwd": list(recorder.ops)}
