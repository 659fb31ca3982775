"""The table of bad inputs: each rule gives one line naming the keys and values; exit code 2, no traceback."""


import copy
import json

import pytest

from tests.conftest import run_inprocess, run_launch
from tprimat.compose import compose
from tprimat.measure.devices import detect
from tprimat.results.result import read_result
from tprimat.spec.build import SpecError, build_spec
from tprimat.spec.detect import DetectedHardware
from tprimat.spec.validate import validate

BAD = [
    # (overrides, every fragment the violation line must contain)
    (["platform.devices_per_node=2", "parallelism.dp=1"],
     ["platform.devices_per_node=2", "dp=1", "world size must equal tp * pp * cp * dp"]),
    (["platform.devices_per_node=3", "parallelism.tp=2"],
     ["parallelism.tp=2", "world size must be a multiple of tp * pp * cp"]),
    (["training.global_batch_size=10"],
     ["training.global_batch_size=10", "training.micro_batch_size=4", "divisible by micro_batch_size * dp"]),
    (["platform.devices_per_node=4", "parallelism.tp=4"],
     ["model.num_kv_heads=2", "parallelism.tp=4", "divisible by tp"]),
    (["platform.devices_per_node=3", "parallelism.tp=3", "training.global_batch_size=12"],
     ["model.num_attention_heads=8", "parallelism.tp=3"]),
    (["platform.devices_per_node=3", "parallelism.pp=3", "training.global_batch_size=12"],
     ["model.num_layers=4", "parallelism.pp=3", "divisible by pp"]),
    (["platform.devices_per_node=3", "parallelism.cp=3", "training.global_batch_size=12"],
     ["training.seq_length=256", "parallelism.cp=3", "divisible by cp"]),
    (["training.precision=fp8"], ["training.precision=fp8", "platform.name=cpu", "FP8 tensor cores"]),
    (["benchmark.preflight_file=/nonexistent/preflight.json"],
     ["benchmark.preflight_file=/nonexistent/preflight.json", "no such file"]),
    (["parallelism.vp=2"], ["parallelism.vp=2", "parallelism.pp=1", "interleaved schedule needs pp > 1"]),
    (["training.grad_reduce_in_fp32=false"], ["training.grad_reduce_in_fp32=false", "framework.name=native"]),
    (["platform=nvidia", "platform.gpu=a100", "platform.devices_per_node=1", "training.precision=fp8"],
     ["training.precision=fp8", "platform.gpu=a100", "no fp8 tensor cores"]),
    (["platform=cpu", "model=llama"], ["model.name=llama", "GiB per device", "exceeds"]),
    (["platform=nvidia", "platform.gpu=h100", "model=llama", "methodology=identical_config", "parallelism.fsdp=false",
      "training.activation_checkpointing=none"],
     ["fsdp=False", "exceeds 80.0 GiB", "hardware table: NVIDIA H100 SXM"]),
    (["training.precision=fp16"], ["training.precision=fp16", "must be one of bf16, fp32, fp8"]),
    (["platform.name=tpu"], ["platform.name=tpu", "must be one of cpu, nvidia, amd"]),
    (["logging.wandb.mode=sometimes"], ["logging.wandb.mode=sometimes", "offline, online, disabled"]),
    (["training.activation_checkpointing=some"], ["training.activation_checkpointing=some", "none, full, selective"]),
    (["methodology.name=fastest"], ["methodology.name=fastest", "maximum_performance, identical_config"]),
    (["parallelism.pp_schedule=zb"], ["parallelism.pp_schedule=zb", "gpipe, 1f1b"]),
    (["training.micro_batch_size=0"], ["training.micro_batch_size=0", "must be >= 1"]),
    # a size past any real model is named, not estimated (the issue: 184,706 GiB "per device" for this one)
    (["model.hidden_size=1048576"], ["model.hidden_size=1048576", "must be <= 65,536"]),
    (["model.num_layers=100000"], ["model.num_layers=100000", "must be <= 1,024"]),
    (["training.seq_length=100000000"], ["training.seq_length=100000000", "must be <= 33,554,432"]),
    (["benchmark.repeats=0"], ["benchmark.repeats=0", "must be >= 1"]),
    (["benchmark.warmup_steps=-1"], ["benchmark.warmup_steps=-1", "must be >= 0"]),
    (["training.optimizer.lr=0"], ["training.optimizer.lr=0", "must be > 0"]),
    (["training.optimizer.min_lr=0.1"], ["training.optimizer.min_lr=0.1", "min_lr must not exceed lr"]),
    (["training.optimizer.beta2=1.0"], ["training.optimizer.beta2=1.0", "[0, 1)"]),
    (["parallelism.zero_stage=4"], ["parallelism.zero_stage=4", "0, 1, 2 or 3"]),
    (["benchmark.warmup_steps=20"], ["benchmark.warmup_steps=20", "training.max_steps=20", "warmup_steps < max_steps"]),
    (["training.optimizer.warmup_steps=30"], ["training.optimizer.warmup_steps=30", "warmup_steps <= max_steps"]),
    (["parallelism.fsdp=true", "parallelism.zero_stage=2"], ["parallelism.fsdp=true", "zero_stage=2", "choose one"]),
    (["parallelism.sequence_parallel=true"], ["parallelism.sequence_parallel=true", "tp > 1"]),
    (["platform=amd", "platform.gpu=h100", "platform.devices_per_node=1"],
     ["platform.gpu=h100", "platform.name=amd", "nvidia device"]),
    (["platform=cpu", "platform.gpu=mi300x"], ["platform.gpu=mi300x", "a CPU platform has no GPU"]),
    (["model.num_attention_heads=6", "model.num_kv_heads=2"],
     ["model.hidden_size=256", "model.num_attention_heads=6", "divisible by num_attention_heads"]),
    (["model.num_kv_heads=3"], ["model.num_attention_heads=8", "model.num_kv_heads=3", "multiple of KV heads"]),
    (["training.seq_length=4096"], ["training.seq_length=4096", "model.max_position_embeddings=2048"]),
    (["framework.name=caffe"], ["framework.name=caffe", "unknown backend", "native"]),
    # out-of-range reals that used to train to NaN or fail at run time
    (["model.rope_theta=0"], ["model.rope_theta=0.0", "must be > 0"]),
    (["training.optimizer.eps=-1"], ["training.optimizer.eps=-1.0", "must be > 0"]),
    (["platform.price_per_device_hour_usd=-5"], ["platform.price_per_device_hour_usd=-5.0", "must be > 0"]),
    (["model.rms_norm_eps=0"], ["model.rms_norm_eps=0.0", "must be > 0"]),
    (["framework.timeout_min=0"], ["framework.timeout_min=0.0", "must be > 0"]),
    # 10^12 sequences of 256 tokens: 2.56e14 token ids, 16 bytes each with labels = 3,814,697 GiB
    (["training.global_batch_size=1000000000000"],
     ["training.global_batch_size=1000000000000", "training.seq_length=256", "3,814,697 GiB", "lower global_batch_size"]),
]
NON_FINITE = ["training.optimizer.lr=inf", "training.optimizer.lr=nan", "training.optimizer.weight_decay=nan",
              "benchmark.telemetry_interval_s=nan", "model.rope_theta=-inf", "platform.price_per_device_hour_usd=inf"]


def test_integers_beyond_int64_are_refused_at_the_typed_boundary():
    from tprimat.spec.build import SpecError

    with pytest.raises(SpecError) as err:
        build_spec(compose(["training.max_steps=99999999999999999999"]), detect())
    assert err.value.problems == ["training.max_steps=99999999999999999999: beyond the 64-bit integer range "
                                  "(|value| < 2**63)"]


@pytest.mark.slow
def test_an_unknown_preset_is_refused_naming_the_presets(tmp_path):
    from tests.conftest import run_launch

    proc = run_launch(tmp_path, "experiment=nope", "dry_run=true")
    assert proc.returncode == 2
    said = proc.stdout + proc.stderr
    assert "experiment=nope: no such preset in conf/experiment; known: amd_all, nvidia_all" in said
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "invalid"


def problems_for(overrides, hw=None, dry_run=True):
    hw = hw or detect()
    return validate(build_spec(compose(overrides), hw), hw, dry_run=dry_run)


@pytest.mark.parametrize("overrides,fragments", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_each_rule_names_keys_values_and_rule(overrides, fragments):
    problems = problems_for(overrides)
    assert any(all(f in line for f in fragments) for line in problems), problems
    assert all("\n" not in line for line in problems)


def test_the_default_config_is_valid():
    assert problems_for([], dry_run=False) == []


def test_all_violations_are_reported_together():
    problems = problems_for(["training.precision=fp16", "training.micro_batch_size=0"])
    assert len(problems) == 2


def test_platform_hardware_must_be_present_unless_dry_run():
    cpu = DetectedHardware("cpu", "AMD EPYC", 1, 24.0, None)
    overrides = ["platform=nvidia", "platform.gpu=h100", "platform.devices_per_node=1"]
    assert any("no nvidia GPU is visible" in p and "dry_run=true" in p for p in problems_for(overrides, cpu, False))
    assert problems_for(overrides, cpu, True) == []


def test_more_devices_than_the_node_has():
    one_h100 = DetectedHardware("nvidia", "NVIDIA H100 80GB HBM3", 1, 79.6, "h100")
    problems = problems_for(["platform=nvidia", "platform.devices_per_node=2", "model=llama_tiny"], one_h100, False)
    assert any("platform.devices_per_node=2" in p and "only 1" in p for p in problems), problems


def test_unknown_key_added_on_the_command_line_is_rejected():
    with pytest.raises(SpecError, match=r"training.foo: unknown key"):
        build_spec(compose(["+training.foo=1"]), detect())


@pytest.mark.slow
def test_invalid_run_exits_2_without_traceback_and_records_why(tmp_path):
    proc = run_launch(tmp_path, "training.global_batch_size=10", "training.precision=fp8")
    assert proc.returncode == 2, proc.stderr
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output
    assert "training.global_batch_size=10" in output and "training.precision=fp8" in output
    result = read_result(tmp_path / "result.json")
    assert result["status"] == "invalid" and "divisible by micro_batch_size" in result["error"]


def test_invalid_point_result_in_process(tmp_path):
    out = run_inprocess(tmp_path, ["parallelism.tp=2"])
    assert out.status == "invalid" and out.exit_code == 2
    assert "world size" in out.result["error"]


@pytest.mark.slow
def test_type_errors_are_rejected_by_the_schema(tmp_path):
    proc = run_launch(tmp_path, "training.max_steps=many")
    assert proc.returncode != 0
    assert "training.max_steps" in proc.stderr
    assert not (tmp_path / "result.json").exists()


def test_a_backend_whose_package_is_missing_says_how_to_install(monkeypatch):
    from tprimat import backends
    from tprimat.spec.frameworks import FRAMEWORKS, FrameworkInfo

    monkeypatch.setitem(FRAMEWORKS, "ghost", FrameworkInfo("ghost", "no_such_module.backend", "a framework", "ghost"))
    with pytest.raises(backends.BackendUnavailable, match=r"not installed.*pip install 'tprimat\[ghost\]'"):
        backends.load("ghost")


@pytest.mark.parametrize("override", NON_FINITE)
def test_non_finite_numbers_are_refused_at_the_typed_boundary(override):
    key, _, value = override.partition("=")
    with pytest.raises(SpecError) as info:
        build_spec(compose([override]), detect())
    assert info.value.problems == [f"{key}={float(value)}: must be a finite number"]


@pytest.mark.slow
def test_an_unresolvable_interpolation_is_invalid_with_one_line(tmp_path):
    proc = run_launch(tmp_path, "training.optimizer.lr=${foo.bar}", "logging.wandb.mode=disabled")
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr
    result = read_result(tmp_path / "result.json")
    assert result["status"] == "invalid" and result["error"] == (
        "cannot resolve the config: training.optimizer.lr: InterpolationKeyError: Interpolation key 'foo.bar' not found")


@pytest.mark.slow
def test_a_secret_an_interpolation_resolves_never_reaches_messages_or_results(tmp_path):
    secret = "sk-test-0123456789abcdef"
    env = {"WANDB_API_KEY": secret}
    for run in ("typo", "named"):
        (tmp_path / run).mkdir()
    typo = run_launch(tmp_path / "typo", "training.optimizer.lr=${oc.env:WANDB_API_KEY}",
                      "logging.wandb.mode=disabled", env=env)
    named = run_launch(tmp_path / "named", "run_name=${oc.env:WANDB_API_KEY}", "training.max_steps=2",
                       "benchmark.warmup_steps=0", "training.optimizer.warmup_steps=1", "logging.wandb.mode=disabled",
                       env=env)
    assert typo.returncode == 2 and named.returncode == 0, named.stderr[-2000:]
    for proc, run in ((typo, "typo"), (named, "named")):
        assert secret not in proc.stdout + proc.stderr
        text = (tmp_path / run / "result.json").read_text()
        assert secret not in text and "<redacted WANDB_API_KEY>" in text


@pytest.mark.slow
def test_an_over_long_override_is_one_line_and_exit_2(tmp_path):
    proc = run_launch(tmp_path, "model=" + "x" * 5000)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "invalid: model=<5000 characters>: an override must be at most 1000 characters"


def test_wandb_online_without_credentials_is_refused_before_training(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc: no `wandb login`
    problems = problems_for(["logging.wandb.mode=online"], dry_run=False)
    assert any(p.startswith("logging.wandb.mode=online: no W&B credentials") for p in problems), problems
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert not any("W&B" in p for p in problems_for(["logging.wandb.mode=online"], dry_run=False))


@pytest.mark.slow
def test_an_unclosed_interpolation_names_the_key_typed(tmp_path):
    from tests.conftest import run_launch

    proc = run_launch(tmp_path, "run_name=${foo", "dry_run=true")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("invalid: run_name=${foo: an interpolation ${...} is not closed (a } is missing); "
                                   "quote the value if the text is meant literally")


def closed_port() -> int:
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on once this socket is closed
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_wandb_online_but_unreachable_is_one_line_before_training_or_goes_on_offline(monkeypatch, tmp_path):
    """A W&B server that does not answer (here a closed loopback port): refused in one line before any step,
    with a result written; with logging.wandb.offline_if_unreachable=true the run goes on offline and says so."""
    from tests.conftest import run_inprocess

    monkeypatch.setenv("WANDB_API_KEY", "0123456789abcdef0123456789abcdef01234567")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port()}")
    steps = ["training.max_steps=2", "training.optimizer.warmup_steps=1", "benchmark.warmup_steps=1",
             "logging.wandb.mode=online"]
    refused = run_inprocess(tmp_path / "refused", steps)
    assert refused.status == "invalid" and refused.result["steps"] == []
    assert refused.result["error"].startswith("logging.wandb.mode=online: W&B unreachable (127.0.0.1:")
    assert "logging.wandb.offline_if_unreachable=true" in refused.result["error"]
    assert (tmp_path / "refused" / "result.json").exists()
    went_on = run_inprocess(tmp_path / "offline", [*steps, "logging.wandb.offline_if_unreachable=true"])
    assert went_on.status == "ok" and went_on.result["wandb"]["mode"] == "offline"
    assert any(w.startswith("logging.wandb.mode=online: W&B unreachable") for w in went_on.result["warnings"])


@pytest.mark.parametrize("override,said", [
    ("run_name=${foo", "invalid: run_name=${foo: an interpolation ${...} is not closed"),
    ("experiment=nope", "invalid: experiment=nope: no such preset in conf/experiment; known: amd_all, nvidia_all"),
])
def test_plan_and_project_refuse_a_bad_override_in_one_line(override, said):
    """`tprimat plan` crashed on Hydra's grammar error and called an unknown preset an unknown key: both entry
    points now say what launch.py says, exit 2."""
    import contextlib
    import io

    from tprimat.cli import main

    for command in (["plan"], ["project"], ["plan", "--best"]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as code:
            main([*command, override])
        assert code.value.code == 2 and out.getvalue().strip().startswith(said), out.getvalue()


@pytest.mark.parametrize("override", ["model.name=${nope.x}", "framework.name=${oc.env:TPRIMAT_UNSET_VARIABLE}"])
def test_plan_and_project_name_the_interpolation_typed_that_cannot_resolve(override):
    """A typed interpolation that cannot resolve: every entry point names the override as typed, exit 2, no
    traceback (project printed one; plan named no key)."""
    import contextlib
    import io

    from tprimat.cli import main

    for command in (["plan"], ["project"], ["plan", "--best"]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), pytest.raises(SystemExit) as code:
            main([*command, override])
        text = out.getvalue()
        flat = " ".join(text.replace("│", " ").split())  # plan's table wraps its reason column
        assert code.value.code == 2 and "cannot resolve the interpolation" in flat, text
        assert override.partition("=")[0] in flat and override.split(":")[-1].rstrip("}") in flat, text
        assert "Traceback" not in text


@pytest.mark.slow
def test_launch_names_an_interpolation_of_the_run_directorys_keys(tmp_path):
    """model.name and framework.name name the run directory: Hydra failed there with a traceback naming
    hydra.run.dir before tprimat could answer; now one line naming the override typed, exit 2."""
    from tests.conftest import run_launch

    proc = run_launch(tmp_path, "model.name=${nope.x}", "dry_run=true")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip() == ("invalid: model.name=${nope.x}: cannot resolve the interpolation: "
                                   "InterpolationKeyError: Interpolation key 'nope.x' not found")


@pytest.mark.parametrize("override", ["training.micro_batch_size=0", "model.num_attention_heads=0", "parallelism.tp=0",
                                      "parallelism.pp=0", "platform.devices_per_node=0", "platform.nodes=0"])
def test_a_zero_size_is_refused_by_key_in_plans_and_runs_alike(override):
    """The preparation every path shares (run, dry run, plan, sweep) refuses a zero size by its key and rule, with
    the nearest-fit search asked for, which once divided by it (ZeroDivisionError in tprimat plan and launch.py)."""
    from tprimat.execute.prepare import prepare

    hw = detect()
    spec = build_spec(compose([override]), hw)
    for dry_run in (True, False):
        prepared = prepare(spec, hw, dry_run=dry_run, suggest=True)
        assert prepared.plan is None and f"{override}: must be >= 1" in prepared.problems, prepared.problems


@pytest.mark.parametrize("overrides,expected", [
    (["framework.flavour=nemo3"], "framework.flavour=nemo3: must be one of"),
    (["framework=torchtitan", "framework.flavour=nemo2"], "framework.flavour=nemo2: must be one of registry, toml"),
    (["model.name="], "model.name='': must name the model"),
])
def test_a_choice_no_framework_reads_is_refused(overrides, expected):
    assert any(expected in line for line in problems_for(overrides)), problems_for(overrides)


def test_a_plan_is_for_the_target_where_a_framework_is_installed_is_checked_at_launch(tmp_path, monkeypatch):
    """A dry run of a Megatron point (what tprimat plan prepares) needs no Megatron-LM checkout on this machine
    (``check_install``, at launch only); a spec rule of the backend (Megatron on a CPU) is refused by the dry run
    as by a launch."""
    from tprimat.execute.run import execute

    monkeypatch.delenv("MEGATRON_LM_PATH", raising=False)
    point = ["platform=nvidia", "platform.gpu=h100", "model=llama", "framework=megatron", "logging.wandb.mode=disabled"]
    dry = execute(compose([*point, "dry_run=true"]), tmp_path / "dry", [])
    assert dry.result["status"] == "dry_run", dry.result.get("error")
    cpu = execute(compose(["platform=cpu", "framework=megatron", "dry_run=true"]), tmp_path / "cpu", [])
    assert cpu.result["status"] == "invalid" and "trains on NVIDIA or AMD GPUs" in cpu.result["error"]


def test_a_number_for_a_switch_is_refused_naming_the_key():
    """OmegaConf reads any number as a bool (training.compile=2 -> true): refused before composing, by key."""
    from tprimat.compose import OverrideError, check_overrides

    with pytest.raises(OverrideError, match=r"training.compile=2: must be true or false"):
        check_overrides(["training.compile=2"])
    check_overrides(["training.compile=true", "parallelism.fsdp=false", "training.seq_length=2"])  # accepted


@pytest.mark.parametrize("section,key", [("platform", "devices_per_node"), ("platform", "nodes"), ("parallelism", "tp"),
                                         ("training", "micro_batch_size"), ("model", "num_attention_heads")])
def test_tprimat_check_refuses_a_result_with_a_zero_size(tmp_path, section, key):
    """A size is at least 1 in a result too: `tprimat check` accepted a spec with platform.devices_per_node=0 that
    no launch could write (a hand edit, another tool's export); null (not stated) stays accepted."""
    from tprimat.results.result import validate_result

    result = run_inprocess(tmp_path, ["dry_run=true", "logging.wandb.mode=disabled"]).result
    assert validate_result(result) == []
    broken = copy.deepcopy(result)
    broken["spec"][section][key] = 0
    assert any(f"spec/{section}/{key}: 0 is less than the minimum of 1" in p for p in validate_result(broken))
    broken["spec"][section][key] = None
    assert not any(f"spec/{section}/{key}" in p for p in validate_result(broken))


# Each refused by the key the user typed, in a dry run as at launch, exit 2 without a traceback; the rule's source:
# W&B's own project-name rule (wandb_settings.validate_project), an override's grammar (key=value), this machine
# (one CPU node: more are started by torchrun or Slurm), Llama 3.1's RoPE scaling (it divides by the original
# context), the platform's tuned precision (maximum_performance copies it), the largest NVLink domain (NVL72)
BAD_OVERRIDES = [("logging.wandb.project=a/b/c", "logging.wandb.project=a/b/c"),
                 ("platform.nodes=2", "platform.nodes=2"),
                 ("model.rope_original_max_position=0", "model.rope_original_max_position=0"),
                 ("platform.tuned.precision=fp3", "platform.tuned.precision=fp3"),
                 ("platform.devices_per_node=100000", "platform.devices_per_node=100000: must be <= 72")]


@pytest.mark.parametrize("override,said", BAD_OVERRIDES)
@pytest.mark.parametrize("dry_run", ["true", "false"])
def test_a_bad_override_is_refused_by_its_key_dry_run_or_not(tmp_path, monkeypatch, override, said, dry_run):
    """As launch.py runs it, in this process (the rank environment of torchrun or Slurm unset)."""
    for name in ("SLURM_JOB_ID", "SLURM_PROCID", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    out = run_inprocess(tmp_path, [f"dry_run={dry_run}", override])
    assert out.status == "invalid" and out.exit_code == 2 and said in out.result["error"], out.result["error"]


@pytest.mark.slow
@pytest.mark.parametrize("dry_run", ["true", "false"])
def test_an_override_without_a_key_is_one_line_and_exit_2(tmp_path, dry_run):
    proc = run_launch(tmp_path, f"dry_run={dry_run}", "=5")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in output, output[-2000:]
    assert "invalid: =5: an override needs a key" in output, output[-2000:]
