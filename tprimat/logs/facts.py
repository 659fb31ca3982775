"""What a log states about its run, beyond the steps: argument dumps (Megatron-LM, Megatron-DeepSpeed,
DeepSpeed's config print), Megatron-Bridge's YAML config dump, launcher lines (torchrun, torchtitan's command
line), torchtitan's model arguments and Primus's ``rank-N/W`` prefixes.

A fact is ``key -> (value, where)``: ``key`` is a tprimat spec key (``training.seq_length``) or ``world_size``;
``where`` says which line stated it. The first statement of a key wins. Nothing here guesses: a key the log
does not state is absent.
"""

from __future__ import annotations

import re
from typing import Optional

from tprimat.logs.clean import number

Facts = dict  # key -> (value, where)

# Argument names of Megatron-LM / Megatron-DeepSpeed / Megatron-Bridge / DeepSpeed -> tprimat keys.
ARGUMENTS = {
    "seq_length": "training.seq_length", "global_batch_size": "training.global_batch_size",
    "micro_batch_size": "training.micro_batch_size", "train_iters": "training.max_steps",
    "tensor_model_parallel_size": "parallelism.tp", "pipeline_model_parallel_size": "parallelism.pp",
    "context_parallel_size": "parallelism.cp", "data_parallel_size": "parallelism.dp", "world_size": "world_size",
    "num_layers": "model.num_layers", "hidden_size": "model.hidden_size", "ffn_hidden_size": "model.ffn_hidden_size",
    "num_attention_heads": "model.num_attention_heads", "num_query_groups": "megatron.num_query_groups",
    "group_query_attention": "megatron.group_query_attention", "kv_channels": "model.head_dim",
    "padded_vocab_size": "model.vocab_size", "swiglu": "megatron.swiglu",
    "train_batch_size": "training.global_batch_size", "train_micro_batch_size_per_gpu": "training.micro_batch_size",
}
YAML = re.compile(r"^(\w+): ([^\s#]+)$")  # "global_batch_size: 512" (Megatron-Bridge config dump)
TORCHRUN = re.compile(r"(?:torchrun|torch\.distributed\.run)\b(.*)")
FLAG_NAME = re.compile(r"[\w.-]+")
TITAN_FLAGS = {"training.seq_len": "training.seq_length", "training.local_batch_size": "torchtitan.local_batch_size",
               "training.global_batch_size": "training.global_batch_size", "training.steps": "training.max_steps",
               "parallelism.tensor_parallel_degree": "parallelism.tp",
               "parallelism.pipeline_parallel_degree": "parallelism.pp",
               "parallelism.context_parallel_degree": "parallelism.cp"}
MODEL_ARGS = re.compile(r"TransformerModelArgs\((.*)")
MODEL_ARG = re.compile(r"(\w+)=([\w.+-]+)")


def scalar(text: str):
    """A dumped value as bool, int or float; None for None/empty/anything else."""
    if text in ("True", "true"):
        return True
    if text in ("False", "false"):
        return False
    value = number(text)
    if value is None:
        return None
    return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value


# Keys that count something: a printed 0 or -1 there (MLPerf's "global_batch_size": -1, an unset argument) states
# nothing, it is no size a run can have.
COUNTS = frozenset((*(v for k, v in ARGUMENTS.items() if k not in ("swiglu", "group_query_attention")),
                    "torchtitan.local_batch_size", "mlperf.gradient_accumulation_steps", "platform.devices_per_node",
                    "platform.nodes", "model.num_kv_heads"))


def state(facts: Facts, key: str, value, where: str) -> None:
    if value is None or key in facts:
        return
    if key in COUNTS and isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
        return
    facts[key] = (value, where)


# What a line holds where ``read_line`` can state a fact from it, or ``clean`` a world size from its prefix
# (Primus's ``[rank-N/W]``): a text without any of them states nothing, however it is read.
STATING = (" ...", "torchrun", "torch.distributed.run", "TransformerModelArgs(", "[rank-",
           *(f"{name}: " for name in ARGUMENTS))


def may_state(text: str) -> bool:
    """Whether lines may state a fact (False: they state none; a cheap test of their raw text)."""
    return any(word in text for word in STATING)


def read_line(text: str, facts: Facts) -> None:
    """Facts stated by one cleaned line (cheap substring tests first: most lines state nothing)."""
    if " ..." in text:
        if (pair := dump_pair(text)) and pair[0] in ARGUMENTS:
            state(facts, ARGUMENTS[pair[0]], scalar(pair[1]), f"log: arguments dump ({pair[0]})")
    elif "torchrun" in text or "torch.distributed.run" in text:
        launcher(text, facts)
    elif "TransformerModelArgs(" in text:
        titan_model(text, facts)
    elif text.count(":") == 1 and len(text) < 100 and (m := YAML.match(text)) and m.group(1) in ARGUMENTS:
        state(facts, ARGUMENTS[m.group(1)], scalar(m.group(2)), f"log: config dump ({m.group(1)})")


def dump_pair(text: str) -> Optional[tuple[str, str]]:
    """Megatron's arguments dump, ``  seq_length ........ 4096``: the word before the last `` ...`` and the one
    token after its dots, or None. Linear in the line (a regex search here was quadratic on long lines)."""
    at = text.rfind(" ...")
    start = at
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    if at < 1 or start == at:
        return None
    tokens = text[at + 1:].lstrip(".").split()
    return (text[start:at], tokens[0]) if len(tokens) == 1 else None


def command_flags(text: str) -> list[tuple[str, str]]:
    """``--name=value`` and ``--name value`` pairs of a command line (a value never starts with ``-``), by
    splitting on whitespace: linear in the line."""
    tokens, pairs = text.split(), []
    for i, token in enumerate(tokens):
        if not token.startswith("--"):
            continue
        name, eq, value = token[2:].partition("=")
        if not eq:
            value = tokens[i + 1] if i + 1 < len(tokens) else ""
        if value and not value.startswith("-") and FLAG_NAME.fullmatch(name):
            pairs.append((name, value))
    return pairs


def launcher(text: str, facts: Facts) -> None:
    m = TORCHRUN.search(text)
    flags = {k.replace("-", "_"): v for k, v in command_flags(m.group(1))} if m else {}
    per_node = scalar(flags.get("nproc_per_node", ""))
    if isinstance(per_node, int):
        nodes = scalar(flags.get("nnodes", "1").split(":")[-1])
        if isinstance(nodes, int):
            state(facts, "platform.devices_per_node", per_node, "log: torchrun --nproc_per_node")
            state(facts, "platform.nodes", nodes, "log: torchrun --nnodes (1 when absent)")
            state(facts, "world_size", per_node * nodes, "log: torchrun --nproc_per_node x --nnodes")
    for flag, key in TITAN_FLAGS.items():
        if flag in flags:
            state(facts, key, scalar(flags[flag]), f"log: command line --{flag}")


def titan_model(text: str, facts: Facts) -> None:
    """torchtitan's printed Llama model arguments; the FFN width follows its own rule from them."""
    args = {k: scalar(v) for k, v in MODEL_ARG.findall(MODEL_ARGS.search(text).group(1))}
    where = "log: torchtitan TransformerModelArgs"
    for arg, key in (("dim", "model.hidden_size"), ("n_layers", "model.num_layers"),
                     ("n_heads", "model.num_attention_heads"), ("n_kv_heads", "model.num_kv_heads"),
                     ("vocab_size", "model.vocab_size"), ("rope_theta", "model.rope_theta")):
        state(facts, key, args.get(arg), where)
    ffn = titan_ffn(args.get("dim"), args.get("multiple_of"), args.get("ffn_dim_multiplier"))
    state(facts, "model.ffn_hidden_size", ffn, where + " (FFN width by torchtitan's rule)")
    if isinstance(args.get("dim"), int):
        state(facts, "megatron.swiglu", True, where + " (Llama: SwiGLU)")


def titan_ffn(dim, multiple_of, multiplier) -> Optional[int]:
    """torchtitan / Llama FeedForward width: 2/3 of 4*dim, times the multiplier, rounded up to multiple_of."""
    if not isinstance(dim, int) or not isinstance(multiple_of, int):
        return None
    hidden = int(2 * 4 * dim / 3)
    if isinstance(multiplier, (int, float)) and not isinstance(multiplier, bool):
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)
