"""A result consistent with itself: the throughput it states is what its own steps, tokens and world size give,
and a successful result measured something. ``tprimat check`` runs this after the schema (``validate_result``),
and so does every reader (compare and gate read only what check accepts): a doctored figure, a world size
changed after the fact or halved tokens cannot pass as a faster or slower run."""

from __future__ import annotations

import math

REL_TOL = 1e-6  # the stated rate is computed from the same floats: only rounding may differ


def measured_steps(steps) -> list[tuple[float, float]]:
    """(tokens, seconds) of each step past warm-up with both (the steps the summary's rates are computed from)."""
    if isinstance(steps, dict):  # as stored: columns
        rows = zip(steps.get("warmup") or [], steps.get("step_time_s") or [], steps.get("tokens") or [])
    else:
        rows = ((s.get("warmup"), s.get("step_time_s"), s.get("tokens")) for s in steps or [] if isinstance(s, dict))
    return [(tokens, seconds) for warmup, seconds, tokens in rows if not warmup and seconds and tokens]


def all_warmup(steps) -> bool:
    flags = (steps.get("warmup") or []) if isinstance(steps, dict) else [
        s.get("warmup") for s in steps or [] if isinstance(s, dict)]
    return bool(flags) and all(flags)


def problems(result: dict) -> list[str]:
    if not isinstance(result, dict):
        return []
    summary, plan = result.get("summary") or {}, result.get("plan") or {}
    steps = measured_steps(result.get("steps"))
    if result.get("status") == "ok" and (summary.get("measured_steps") == 0 or all_warmup(result.get("steps"))):
        return ["status ok, but no step was measured (summary.measured_steps 0, or every step a warm-up)"]
    source = (summary.get("provenance") or {}).get("tokens_per_s_per_device")
    world, stated = plan.get("world_size"), summary.get("tokens_per_s_per_device")
    if result.get("status") == "ok" and not result.get("summary"):
        return ["summary: missing in a result with status ok (nothing was measured)"]
    if source in ("measured", "computed") and not steps:
        return [f"summary/tokens_per_s_per_device: {stated!r} stated as {source}, but no measured step has a time "
                "and tokens to give it"]
    if source not in ("measured", "computed") or not isinstance(world, int) or world < 1:
        return []
    tokens, seconds = sum(t for t, _ in steps), sum(s for _, s in steps)
    try:
        expected = float(tokens) / float(seconds) / world
    except OverflowError:
        return [f"steps: {len(steps)} measured steps whose tokens or step times are beyond the float range"]
    if not isinstance(stated, (int, float)) or not math.isclose(stated, expected, rel_tol=REL_TOL):
        return [f"summary/tokens_per_s_per_device: {stated!r} stated ({source}), but the {len(steps)} measured "
                f"steps' {tokens:,.0f} tokens over {seconds:.6g} s on plan.world_size {world} give {expected:.6g}"]
    return []
