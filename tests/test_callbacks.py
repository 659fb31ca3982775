"""tprimat.callbacks in users' own scripts: a plain PyTorch loop and a real Hugging Face Trainer, trained on CPU,
write results that ``tprimat check`` accepts and ``compare`` reads beside a native run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import run_inprocess
from tprimat.callbacks import Recorder
from tprimat.compare.groups import build_groups
from tprimat.compare.load import Loaded
from tprimat.results.result import read_result, validate_result

OVERRIDES = ["model=llama_tiny", "training.seq_length=64", "training.global_batch_size=4"]


def own_loop(recorder: Recorder, steps: int, fail_at: int = 0) -> list[float]:
    """A user's loop: their model, data and optimizer; tprimat only times the steps."""
    from tprimat.backends.native.model import Decoder
    from tprimat.compose import compose
    from tprimat.spec.build import build_spec

    torch.manual_seed(0)
    model = Decoder(build_spec(compose(["model=llama_tiny"])).model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randint(0, 2048, (4, 65))
    losses = []
    for i in range(steps):
        with recorder.step(tokens=4 * 64) as step:
            if i + 1 == fail_at:
                raise RuntimeError("CUDA out of memory (simulated by the user's loop)")
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            step.loss, step.lr = loss.item(), 1e-3
        losses.append(step.loss)
    return losses


def test_a_plain_pytorch_loop_becomes_a_result(tmp_path):
    with Recorder(tmp_path, OVERRIDES) as rec:
        losses = own_loop(rec, 6)
    result = read_result(tmp_path / "result.json")
    assert validate_result(result) == [] and result["status"] == "ok"
    steps = result["steps"]
    assert [s["loss"] for s in steps] == losses and losses[-1] < losses[0]
    assert all(s["tokens"] == 256 and s["step_time_s"] > 0 for s in steps) and steps[0]["warmup"]
    measured = [s for s in steps if not s["warmup"]]  # tokens over time of the measured steps, by hand
    expected = sum(s["tokens"] for s in measured) / sum(s["step_time_s"] for s in measured)
    summary = result["summary"]
    assert summary["tokens_per_s"] == pytest.approx(expected) and summary["provenance"]["tokens_per_s"] == "measured"
    spec = result["spec"]  # what the user stated, nothing else
    assert spec["model"]["name"] == "llama_tiny" and spec["training"]["seq_length"] == 64
    assert spec["training"]["micro_batch_size"] is None and spec["parallelism"]["tp"] is None
    assert result["framework"]["name"] == "pytorch" and result["source"]["kind"] == "callback"
    assert result["plan"]["flops_per_token"] > 0  # the model is stated, so its FLOPs are computed
    check = subprocess.run([sys.executable, "-m", "tprimat", "check", str(tmp_path / "result.json")],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_loop_that_raises_leaves_a_failed_result_with_its_steps(tmp_path):
    with pytest.raises(RuntimeError):
        with Recorder(tmp_path, OVERRIDES) as rec:
            own_loop(rec, 6, fail_at=4)
    result = read_result(tmp_path / "result.json")
    assert validate_result(result) == [] and result["status"] == "failed"
    assert result["error"] == "RuntimeError: CUDA out of memory (simulated by the user's loop)"
    assert len(result["steps"]) == 3


@pytest.mark.slow
def test_a_hugging_face_trainer_with_the_callback(tmp_path):
    transformers = pytest.importorskip("transformers")
    from tprimat.callbacks.hf import TprimatCallback

    config = transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 256, (32, 32))]
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "hf"), max_steps=5, per_device_train_batch_size=2,
                                          logging_steps=1, report_to=[], use_cpu=True, save_strategy="no",
                                          learning_rate=1e-3, disable_tqdm=True)
    callback = TprimatCallback(tmp_path / "run", ["training.seq_length=32"], seq_length=32)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    trainer.train()
    result = read_result(tmp_path / "run" / "result.json")
    assert validate_result(result) == [] and result["status"] == "ok"
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]  # the Trainer's own logs, read back
    assert [s["loss"] for s in result["steps"]] == [entry["loss"] for entry in logged]
    assert [s["lr"] for s in result["steps"]] == [entry["learning_rate"] for entry in logged]
    assert all(s["tokens"] == 2 * 32 and s["step_time_s"] > 0 for s in result["steps"])
    assert result["framework"]["name"] == "transformers" and result["framework"]["version"].startswith("transformers ")


@pytest.mark.slow
def test_compare_reads_callback_results_beside_a_native_run(tmp_path):
    native = run_inprocess(tmp_path / "native", ["training.max_steps=4", "benchmark.warmup_steps=1",
                                                  "logging.wandb.mode=disabled"]).result
    with Recorder(tmp_path / "mine", OVERRIDES) as rec:
        own_loop(rec, 4)
    groups = build_groups([Loaded(Path("native/result.json"), native), Loaded(Path("mine/result.json"), rec.result)])
    assert len(groups) == 2
    mine = next(g for g in groups if g.framework == "pytorch")
    assert mine.metrics["tokens_per_s"] == pytest.approx(rec.result["summary"]["tokens_per_s"])


@pytest.mark.slow
def test_a_lightning_trainer_with_the_callback(tmp_path):
    lightning = pytest.importorskip("lightning")
    from tprimat.callbacks.lightning import TprimatLightningCallback

    class TinyLM(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.embed, self.head = torch.nn.Embedding(256, 32), torch.nn.Linear(32, 256)
            self.losses: list[float] = []  # what training_step returned, read back by the test

        def training_step(self, batch, batch_idx):
            logits = self.head(self.embed(batch[:, :-1]))
            loss = F.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-3)

    torch.manual_seed(0)
    module = TinyLM()
    data = torch.utils.data.DataLoader(torch.randint(0, 256, (64, 33)), batch_size=2)
    callback = TprimatLightningCallback(tmp_path / "run", ["training.seq_length=33"])
    trainer = lightning.Trainer(max_steps=5, accumulate_grad_batches=2, accelerator="cpu", devices=1, logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                callbacks=[callback])
    trainer.fit(module, data)
    result = read_result(tmp_path / "run" / "result.json")
    assert validate_result(result) == [] and result["status"] == "ok"
    steps = result["steps"]
    assert len(steps) == 5 and all(s["tokens"] == 2 * 2 * 33 and s["step_time_s"] > 0 for s in steps)
    means = [(a + b) / 2 for a, b in zip(module.losses[0::2], module.losses[1::2])]  # each step's two micro batches
    assert [s["loss"] for s in steps] == pytest.approx(means, rel=1e-6)
    assert all(s["lr"] == 3e-3 for s in steps)
    assert result["framework"]["name"] == "lightning"


def test_a_recorded_loop_writes_the_same_wandb_run_as_a_native_one(tmp_path):
    """wandb="offline": a real offline W&B run beside result.json, read back from its own .wandb file: the spec
    the user stated as config, every step under train/*, the summary, exit code 0."""
    from tprimat.results.wandb_offline import find_offline_runs, read_offline_run

    with Recorder(tmp_path, OVERRIDES, wandb="offline") as rec:
        losses = own_loop(rec, 4)
    result = read_result(tmp_path / "result.json")
    assert result["wandb"]["mode"] == "offline"
    (path,) = find_offline_runs(tmp_path)
    run = read_offline_run(path)
    assert run.run_id == result["wandb"]["id"] and run.config["model"]["name"] == "llama_tiny"
    assert [h["train/loss"] for h in run.history if "train/loss" in h] == pytest.approx(losses)
    assert run.summary["tokens_per_s"] == pytest.approx(result["summary"]["tokens_per_s"])
    assert run.summary["status"] == "ok" and run.exit_code == 0


def test_a_recorded_loop_leaves_no_dead_wandb_service_to_its_children(tmp_path):
    """W&B names its service process in the environment; after the recorder's offline run the name is gone, so a
    child process (a later launch.py) starts its own service instead of dialling a dead one."""
    import os

    with Recorder(tmp_path, OVERRIDES, wandb="offline") as rec:
        own_loop(rec, 2)
    assert "WANDB_SERVICE" not in os.environ
