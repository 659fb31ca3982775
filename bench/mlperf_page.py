"""docs/mlperf.md from tprimat's own commands: ``tprimat ingest`` of each MLPerf Training round's results repository,
then ``tprimat compare --by device --out`` over all of them; the page is the report's time-to-train scores
(``comparison.json``'s ``time_to_train``) at 8 accelerators: per round and benchmark, the fastest system of each
accelerator, and how the seeds' pair (H200 and MI300X) and its successors moved between v5.0 and v5.1.

    python bench/mlperf_page.py training_results_v4.0 training_results_v4.1 training_results_v5.0 training_results_v5.1 \\
        --out docs/mlperf.md

Each repository is a checkout of mlcommons/training_results_v<round> (its folder's name states the round); only its
LLM benchmark folders are read. The commands it ran are written at the top of the page.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ("gpt3", "llama2_70b_lora", "llama31_405b", "llama31_8b")
DEVICES = 8
# the seeds' pair and the GPUs that followed each (hardware-table keys, shown by their rows' names)
PAIR = ("h200", "b200", "gb200", "b300", "gb300", "mi300x", "mi325x", "mi350x", "mi355x")


def tprimat(*args: str) -> str:
    """``tprimat ARGS`` as a user runs it; exit 1 (some files could not be read) is said, with the files."""
    done = subprocess.run([sys.executable, "-m", "tprimat", *args], capture_output=True, text=True, cwd=ROOT)
    if done.returncode not in (0, 1):
        raise SystemExit(f"tprimat {' '.join(args[:2])} failed ({done.returncode}): {done.stderr[-2000:]}")
    if done.returncode == 1:
        said = done.stdout[done.stdout.find("could not be ingested"):] if "could not be ingested" in done.stdout else ""
        print(f"tprimat {args[0]} exited 1: {said[:2000] or done.stderr[-2000:]}")
    return done.stdout


def ingest_all(repos: list[Path], out: Path) -> list[str]:
    commands = []
    for repo in repos:
        folders = sorted(str(f) for b in BENCHMARKS for f in repo.glob(f"*/results/*/{b}") if f.is_dir())
        tprimat("ingest", *folders, "--out", str(out / repo.name))
        commands.append(f"tprimat ingest {repo.name}/*/results/*/{{{','.join(BENCHMARKS)}}} --out ingested/{repo.name}")
    return commands


def accelerator_of(score: dict) -> str:
    return score.get("accelerator_row") or score.get("accelerator") or "not stated"


def fastest_at(scores: list[dict], devices: int) -> dict[tuple, dict]:
    """(round, benchmark, accelerator) -> its fastest scored system at ``devices`` accelerators."""
    best: dict[tuple, dict] = {}
    for s in scores:
        if s["score_minutes"] is None or s["devices"] != devices:
            continue
        key = (s["round"], s["benchmark"], accelerator_of(s))
        if key not in best or s["score_minutes"] < best[key]["score_minutes"]:
            best[key] = s
    return best


def layout(s: dict) -> str:
    return f"{s['nodes']} x {s['devices'] // s['nodes']}" if s.get("nodes") and s.get("devices") else "not stated"


def energy(s: dict) -> str:
    return f"{s['energy_kwh']:,.1f}" if s.get("energy_kwh") is not None else "-"


def round_tables(best: dict[tuple, dict]) -> list[str]:
    lines = []
    for round_, benchmark in sorted({k[:2] for k in best}):
        rows = sorted((s for k, s in best.items() if k[:2] == (round_, benchmark)), key=lambda s: s["score_minutes"])
        lines += [f"### v{round_} {benchmark}", "", "| accelerator | fastest system | nodes x per node | "
                  "time to train (min) | x the fastest | energy (kWh) | runs |", "|---|---|---|---|---|---|---|"]
        for s in rows:
            lines.append(f"| {accelerator_of(s)} | {s['submitter']} {s['system']} | {layout(s)} | "
                         f"{s['score_minutes']:.2f} | {s['score_minutes'] / rows[0]['score_minutes']:.2f} | {energy(s)} | "
                         f"{s['converged']} / {s['runs']} |")
        lines.append("")
    return lines


def pair_lines(best: dict[tuple, dict]) -> list[str]:
    """Each accelerator of the seeds' pair and its successors, v5.0 against v5.1, per benchmark, where a round has it."""
    from tprimat.spec.hardware import DEVICES

    lines = ["| benchmark | accelerator | v5.0 (min) | v5.1 (min) | v5.1 / v5.0 | v5.0 system | v5.1 system |",
             "|---|---|---|---|---|---|---|"]
    for benchmark in BENCHMARKS:
        for key in PAIR:
            found = {r: s for (r, b, a), s in best.items() if b == benchmark and a == DEVICES[key].name
                     and r in ("5.0", "5.1")}
            if not found:
                continue
            old, new = found.get("5.0"), found.get("5.1")
            cells = [f"{old['score_minutes']:.2f}" if old else "-", f"{new['score_minutes']:.2f}" if new else "-",
                     f"{new['score_minutes'] / old['score_minutes']:.2f}" if old and new else "-",
                     f"{old['submitter']} {old['system']}" if old else "-",
                     f"{new['submitter']} {new['system']}" if new else "-"]
            lines.append(f"| {benchmark} | {DEVICES[key].name} | " + " | ".join(cells) + " |")
    return lines


def pair_sentence(best: dict[tuple, dict]) -> str:
    """MI300X's time over H200's at 8 accelerators, each round both ran a benchmark."""
    from tprimat.spec.hardware import DEVICES

    said = []
    for (round_, benchmark) in sorted({k[:2] for k in best}):
        h200, mi300x = (best.get((round_, benchmark, DEVICES[k].name)) for k in ("h200", "mi300x"))
        if h200 and mi300x:
            said.append(f"v{round_} {benchmark}: H200 {h200['score_minutes']:.2f} min, MI300X "
                        f"{mi300x['score_minutes']:.2f} min ({mi300x['score_minutes'] / h200['score_minutes']:.2f}x)")
    return ("The seeds' pair side by side at 8 accelerators (each one's fastest system): " + "; ".join(said) + "."
            if said else "The seeds' pair never met at 8 accelerators.")


def absent(scores: list[dict], best: dict[tuple, dict]) -> str:
    """The round-benchmarks that hold no scored system at ``DEVICES`` accelerators (gpt3, llama31_405b: large
    systems only), with their smallest."""
    shown = {k[:2] for k in best}
    missing = sorted({(s["round"], s["benchmark"]) for s in scores} - shown)
    said = []
    for round_, benchmark in missing:
        sizes = [s["devices"] for s in scores if (s["round"], s["benchmark"]) == (round_, benchmark) and s["devices"]]
        said.append(f"v{round_} {benchmark} (its smallest system: {min(sizes)} accelerators)" if sizes else
                    f"v{round_} {benchmark}")
    return (f"No system at {DEVICES} accelerators: " + "; ".join(said) + ". Every system of every round is in "
            "report.md's time-to-train table." if said else "")


def page(scores: list[dict], commands: list[str], rounds: list[str]) -> str:
    best = fastest_at(scores, DEVICES)
    scored = sum(s["score_minutes"] is not None for s in scores)
    with_energy = [s for s in scores if s.get("energy_kwh") is not None]
    lines = [
        "# MLPerf Training, round by round", "",
        f"Which system trains each MLPerf Training LLM benchmark fastest at {DEVICES} accelerators, in every round that "
        f"has one ({', '.join('v' + r for r in rounds)}): each accelerator's fastest system, by the time to train "
        "MLCommons scores (the olympic mean of a system's runs times its review's scaling factor), and its energy to "
        "train where the submitter measured it (MLPerf Power). Scored by tprimat; every score equals MLCommons' "
        "`mlperf-logging` `result_summarizer`'s on the same folders (`bench/mlperf_rounds.py`).", "",
        f"Made by tprimat's own commands on {datetime.date.today().isoformat()} (`bench/mlperf_page.py`):", "",
        "```bash", *commands, "tprimat compare ingested/ --by device --out report/", "```", "",
        f"{len(scores)} system-benchmarks, {scored} with a score, {len(with_energy)} with an energy score. An "
        "accelerator is its row of tprimat's hardware table where its name maps (two spellings of one GPU are one row).",
        "", "## The seeds' pair and its successors, v5.0 to v5.1", "",
        f"H200 and MI300X, and the GPUs that followed them, at {DEVICES} accelerators: each one's fastest system in "
        "each round; below 1.00, v5.1 trained faster.", "", pair_sentence(best), "", *pair_lines(best), "",
        f"## Each round at {DEVICES} accelerators", "", absent(scores, best), "", *round_tables(best),
        "## Energy to train (MLPerf Power)", "",
        "Energy to train is MLPerf's energy score (the olympic mean of the runs' energies, times the scaling factor); "
        "kWh per million tokens is the median over runs of each run's energy over the tokens it trained to the "
        "target, the unit of tprimat's own runs' `energy_kwh_per_1m_tokens`; \"-\" where the logs state no samples at "
        "the target or no sequence length (gpt3's evals count epochs).", "",
        "| round | benchmark | system | accelerators | time to train (min) | energy (kWh) | kWh per accelerator | "
        "kWh per 1M tokens |", "|---|---|---|---|---|---|---|---|"]
    for s in sorted(with_energy, key=lambda s: (s["round"], s["benchmark"], s["energy_kwh"])):
        lines.append(f"| v{s['round']} | {s['benchmark']} | {s['submitter']} {s['system']} | {s['devices']} | "
                     f"{s['score_minutes']:.2f} | {s['energy_kwh']:,.1f} | {s['energy_kwh_per_device']:.2f} | "
                     + (f"{s['energy_kwh_per_1m_tokens']:.3f} |" if s.get("energy_kwh_per_1m_tokens") else "- |"))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repos", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "mlperf.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ingested = Path(tmp) / "ingested"
        commands = ingest_all(args.repos, ingested)
        tprimat("compare", str(ingested), "--by", "device", "--out", str(Path(tmp) / "report"))
        scores = json.loads((Path(tmp) / "report" / "comparison.json").read_text())["time_to_train"]
    rounds = sorted({s["round"] for s in scores if s["round"]})
    args.out.write_text(page(scores, commands, rounds))
    print(f"wrote {args.out}: {len(scores)} system-benchmarks over {', '.join(rounds)}")


if __name__ == "__main__":
    main()
