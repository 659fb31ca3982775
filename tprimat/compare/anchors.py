"""Published per-GPU throughput (``anchors.json``, packaged and versioned) set beside a comparison's groups.

``tprimat compare ... --anchors``: for each group, the published rows of its model (and of its device, where the
group ran on a named GPU), each marked ``published``, with the group's ratio to it and what makes the pair
apples-to-oranges, named: precision, layout, batch, sequence length, GPU count, power cap. TFLOP/s are set side by
side in tprimat's own convention (Megatron-LM's, causal-halved attention): each row's published figure is
normalised by the refresh script, which also checks every published tokens/s - TFLOP/s pair against the model's
FLOPs per token.

Refresh after editing a row (each with its source): ``python scripts/refresh_anchors.py``.
"""

from __future__ import annotations

import json
from importlib import resources

from tprimat.compare.groups import Group

ANCHORS_FILE = "anchors.json"
LAYOUT_KEYS = ("tp", "pp", "cp", "vp", "fsdp", "async_tp", "compile", "activation_checkpointing")


def load() -> dict:
    return json.loads(resources.files("tprimat.compare").joinpath(ANCHORS_FILE).read_text())


def matching(group: Group, rows: list[dict]) -> list[dict]:
    """The rows of the group's model; of its GPU too when the group ran on a named one."""
    gpu = group.spec["platform"].get("gpu")
    return [row for row in rows if row["model"] == group.spec["model"].get("name") and (gpu is None or row["gpu"] == gpu)]


def group_layout(group: Group) -> dict:
    plan, par, tr = group.first.get("plan") or {}, group.spec["parallelism"], group.spec["training"]
    return {"tp": plan.get("tp", par.get("tp")) or 1, "pp": plan.get("pp", par.get("pp")) or 1,
            "cp": plan.get("cp", par.get("cp")) or 1, "vp": par.get("vp") or 1, "fsdp": bool(par.get("fsdp")),
            "async_tp": False, "compile": bool(tr.get("compile")),
            "activation_checkpointing": tr.get("activation_checkpointing") or "none"}


def differences(group: Group, row: dict) -> list[str]:
    """What differs between the group's run and the published one: each a short phrase naming both sides."""
    tr, found = group.spec["training"], []
    if row["precision"] != tr.get("precision"):
        found.append(f"precision {tr.get('precision') or 'not stated'} vs {row['precision'] or 'not stated'}")
    if row["layout"] is not None:
        mine, theirs = group_layout(group), {**dict.fromkeys(LAYOUT_KEYS), **row["layout"]}
        changed = [f"{k} {'not stated' if mine[k] is None else mine[k]} vs {theirs[k]}" for k in LAYOUT_KEYS
                   if theirs[k] is not None and theirs[k] != mine[k] and not (theirs[k] in (1, False) and not mine[k])]
        found += [f"layout: {c}" for c in changed]
    for key, name in (("global_batch_size", "global batch"), ("micro_batch_size", "micro batch"),
                      ("seq_length", "sequence length")):
        if row[key] is not None and row[key] != tr.get(key):
            found.append(f"{name} {'not stated' if tr.get(key) is None else tr.get(key)} vs {row[key]}")
    if row["gpus"] != group.world_size:
        found.append(f"GPU count {group.world_size or 'not stated'} vs {row['gpus']}")
    mine = group.spec["platform"].get("power_limit_w")
    if row.get("power_w") and row["power_w"] != mine:
        found.append(f"power cap {f'{mine:g} W' if mine else 'none (TDP)'} vs {row['power_w']} W")
    if row["kind"] == "floor":
        found.append("the row is an acceptance floor (a minimum), not a measurement")
    return found


def beside(group: Group, rows: list[dict]) -> list[dict]:
    """The group's published neighbours: each row's tokens/s/device, the group's ratio to it, the differences."""
    rate = group.metrics.get("tokens_per_s_per_device")
    tflops = group.metrics.get("tflops_per_device")
    out = []
    for row in matching(group, rows):
        published = row["tokens_per_s_per_device"]
        out.append({"id": row["id"], "published": True, "kind": row["kind"], "source": row["source"],
                    "gpu": row["gpu"], "gpus": row["gpus"], "precision": row["precision"], "recipe": row["recipe"],
                    "framework_version": row["framework_version"], "date": row["date"],
                    "tokens_per_s_per_device": published,
                    "tflops_per_device_tprimat": row.get("tflops_per_device_tprimat"),
                    "ratio": rate / published if rate and published else None,
                    "tflops_ratio": tflops / row["tflops_per_device_tprimat"]
                    if tflops and row.get("tflops_per_device_tprimat") else None,
                    "differences": differences(group, row)})
    return out


def used_rows(near: dict) -> list[dict]:
    """comparison.json's ``anchors``: every published row set beside some group, once, as the file holds it."""
    used = {row["id"] for rows in near.values() for row in rows}
    return [{**row, "published": True} for row in load()["rows"] if row["id"] in used]


def section(groups: list[Group], near: dict) -> list[str]:
    """report.md's "Beside the published numbers": per group, each matching row with the ratio and differences."""
    lines = ["## Beside the published numbers", "",
             "Published per-GPU rows (tprimat/compare/anchors.json, each with its source), never measurements of "
             "yours; TFLOP/s in tprimat's convention (Megatron-LM's, causal-halved attention). A ratio is this "
             "run's tokens/s/device over the row's; the differences say what makes the pair apples-to-oranges.", ""]
    for group in groups:
        rows = near.get(group.identity) or []
        if not rows:
            lines += [f"- {group.label}: no published row for {group.model} on {group.device}", ""]
            continue
        lines += [f"**{group.label}**", "",
                  "| published row | tokens/s/GPU | TFLOP/s/GPU (tprimat convention) | this run / row | differs in | "
                  "source |", "|---|---|---|---|---|---|"]
        for row in rows:
            ratio = f"{row['ratio']:.3f}" if row["ratio"] is not None else "n/a"
            tflops = row["tflops_per_device_tprimat"]
            lines.append(f"| {row['id']} ({row['kind']}) | {row['tokens_per_s_per_device']:,} | "
                         f"{'n/a' if tflops is None else f'{tflops:,.1f}'} | {ratio} | "
                         f"{'; '.join(row['differences']) or '-'} | {row['source']} |")
        lines.append("")
    return lines


def refreshed(doc: dict, flops_per_token) -> tuple[dict, list[str]]:
    """Every row's TFLOP/s in tprimat's convention, from its tokens/s and ``flops_per_token(model, seq,
    convention)``; a row whose published pair disagrees with that model by more than 2% keeps a ``consistency``
    note saying so (the row stays as published)."""
    problems = []
    for row in doc["rows"]:
        ours = row["tokens_per_s_per_device"] * flops_per_token(row["model"], row["seq_length"], "megatron") / 1e12
        row["tflops_per_device_tprimat"] = round(ours, 1)
        row.pop("consistency", None)
        if row["tflops_per_device"] and row["flops_convention"]:
            theirs = row["tokens_per_s_per_device"] * flops_per_token(row["model"], row["seq_length"],
                                                                      row["flops_convention"]) / 1e12
            if abs(theirs / row["tflops_per_device"] - 1) > 0.02:
                row["consistency"] = (f"{row['tokens_per_s_per_device']:,} tokens/s is {theirs:,.0f} TFLOP/s in the "
                                      f"{row['flops_convention']} convention for this model; published "
                                      f"{row['tflops_per_device']:,}")
                problems.append(f"{row['id']}: {row['consistency']}")
    return doc, problems
