"""The result file: the README's main job end to end, schema, secrets, failures, W&B, sweeps, CLI."""

import io
import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import QUICK, ROOT, run_inprocess
from tprimat.backends.native.train import NativeTrainer
from tprimat.results.columns import columns_of, row_at, rows_of
from tprimat.results.result import SCHEMA_VERSION, read_result, validate_result, write_json, write_result
from tprimat.results.wandb_offline import find_offline_runs, read_offline_run


@pytest.mark.slow
def test_default_launch_writes_a_valid_ok_result(default_run):
    run_dir, proc = default_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = read_result(run_dir)
    assert validate_result(result) == []
    assert result["status"] == "ok" and result["error"] is None and result["schema_version"] == SCHEMA_VERSION
    assert result["spec"]["model"]["name"] == "llama_tiny" and result["spec"]["framework"]["name"] == "native"
    assert result["spec"]["platform"]["name"] in ("cpu", "nvidia", "amd")  # auto resolved
    assert result["framework"]["version"].startswith("torch ")
    env = result["environment"]
    assert env["packages"]["torch"] and env["python"] and env["cpu"]["logical_cores"] >= 1
    assert len(result["steps"]) == result["spec"]["training"]["max_steps"]
    assert result["summary"]["tokens_per_s"] > 0


@pytest.mark.slow
def test_secrets_never_reach_results_logs_or_wandb(default_run):
    run_dir, _ = default_run
    for path in run_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"sk-test-secret-0123456789" not in data, path
            assert b"hf_test_secret_987" not in data, path


@pytest.mark.slow
def test_wandb_offline_run_holds_config_steps_and_summary(default_run):
    run_dir, _ = default_run
    result = read_result(run_dir)
    runs = find_offline_runs(run_dir)
    assert len(runs) == 1 and result["wandb"]["mode"] == "offline"
    run = read_offline_run(runs[0])
    assert run.run_id == result["wandb"]["id"]
    assert run.config["model"]["name"] == "llama_tiny"
    losses = [h["train/loss"] for h in run.history if "train/loss" in h]
    assert losses == pytest.approx([s["loss"] for s in result["steps"]])
    assert run.summary["tokens_per_s"] == pytest.approx(result["summary"]["tokens_per_s"])
    assert run.summary["step_time_s/median"] == pytest.approx(result["summary"]["step_time_s"]["median"])
    assert run.summary["status"] == "ok" and run.exit_code == 0


def test_a_run_that_fails_after_validation_records_failed(tmp_path, monkeypatch):
    real_step = NativeTrainer.step

    def step_then_fail(self, step):
        if step == 2:
            raise RuntimeError("simulated device fault at step 3")
        return real_step(self, step)

    monkeypatch.setattr(NativeTrainer, "step", step_then_fail)
    out = run_inprocess(tmp_path, QUICK)
    assert out.status == "failed" and out.exit_code == 1
    assert "simulated device fault" in out.result["error"]
    assert len(out.result["steps"]) == 2  # what was measured before the failure is kept
    assert read_result(tmp_path)["status"] == "failed"


def test_results_are_written_atomically_and_without_nan(tmp_path):
    write_result({"a": float("nan"), "b": [1.0, float("inf")]}, tmp_path)
    assert json.loads((tmp_path / "result.json").read_text()) == {"a": None, "b": [1.0, None]}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


@pytest.mark.slow
def test_schema_rejects_a_broken_result(default_run):
    result = read_result(default_run[0])
    result["status"] = "great"
    del result["steps"][0]["step_time_s"]
    problems = validate_result(result)
    assert any(p.startswith("status:") for p in problems)
    assert any(p.startswith("steps/0:") and "step_time_s" in p for p in problems)


@pytest.mark.slow
def test_multirun_records_invalid_points_and_goes_on(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={tmp_path}",
                           "parallelism.tp=1,2", *QUICK], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]  # one point was not ok
    ok, invalid = read_result(tmp_path / "0"), read_result(tmp_path / "1")
    assert ok["status"] == "ok" and ok["summary"]["measured_steps"] == 3
    assert invalid["status"] == "invalid" and "parallelism.tp=2" in invalid["error"]
    assert validate_result(ok) == [] and validate_result(invalid) == []
    assert "sweep: 2 points, 1 ok, 1 not ok" in proc.stderr + proc.stdout


@pytest.mark.slow
def test_cli_check(default_run, tmp_path):
    good = default_run[0] / "result.json"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"status": "ok"}))
    proc = subprocess.run([sys.executable, "-m", "tprimat", "check", str(good), str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert f"{good}: ok" in proc.stdout and f"{bad}: INVALID" in proc.stdout


def test_a_step_record_as_a_dict_is_dataclasses_asdict_without_the_copy():
    import dataclasses

    from tprimat.results.records import StepRecord

    record = StepRecord(step=3, step_time_s=0.5, tokens=1024, loss=2.0, lr=1e-4, grad_norm=1.5, memory_gib=1.0,
                        peak_memory_gib=2.0, repeat=1, warmup=True, reported={"tflops_per_gpu": 400.0})
    assert record.as_dict() == dataclasses.asdict(record)
    assert list(record.as_dict()) == [f.name for f in dataclasses.fields(StepRecord)]
    assert record.as_dict()["reported"] is record.reported  # shared, not copied


JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                        st.text(max_size=6))
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(sections=st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=4),
       steps=st.none() | st.lists(st.dictionaries(st.text(max_size=4), JSON_VALUES, min_size=1, max_size=3),
                                  max_size=5))
def test_written_json_is_the_data_with_non_finite_numbers_null(sections, steps):
    """Whatever the result holds, the file reads back as the data with NaN and infinities null (as json's own
    encoder writes them, read back with each constant as null); without arrays it is the same text as
    json.dump(indent=2); an array of plain values (a step column) takes one line, and so does each step object."""
    data = dict(sections) if steps is None else {**sections, "steps": steps}
    out = io.StringIO()
    write_json(data, out)
    expected = json.loads(json.dumps(data), parse_constant=lambda _: None)
    assert json.loads(out.getvalue()) == expected
    if "[" not in json.dumps(data):
        assert out.getvalue() == json.dumps(expected, indent=2) + "\n"
    for key, value in expected.items():
        if isinstance(value, list) and value and not any(isinstance(v, (list, dict)) for v in value):
            line = out.getvalue().split(f"\n  {json.dumps(key)}: ", 1)[1].split("\n", 1)[0]
            assert json.loads(line.removesuffix(",")) == value
    if steps:
        block = out.getvalue().split('\n  "steps": [\n', 1)[1].split("\n  ]", 1)[0]
        assert [json.loads(line.strip().rstrip(",")) for line in block.splitlines()] == expected["steps"]


def test_the_cli_parser_imports_no_torch():
    """`tprimat ingest`, `check` and `compare` start without importing torch (seconds and 200 MB)."""
    code = "import sys; from tprimat.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=ROOT).stdout.strip() == "False"


ODD_VALUES = st.sampled_from([None, True, False, "x", -1, 0, 1, 7, 0.0, -0.0, 1.5, -2.5, 3.0, -4.0,
                              float("nan"), float("inf"), float("-inf"), {}, {"a": 1}, [], [1]])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 29), st.sampled_from(
    ["step", "step_time_s", "tokens", "loss", "lr", "memory_gib", "repeat", "warmup", "reported", "extra", "-step",
     "-warmup", "whole"]), ODD_VALUES), max_size=6))
@example(edits=[(0, "tokens", 3.0), (1, "tokens", 1.5)])  # an integral float is an integer, 1.5 is not
@example(edits=[(0, "tokens", 3.0), (1, "tokens", float("inf"))])  # nor is infinity
@example(edits=[(0, "repeat", 1), (1, "repeat", -1)])  # one sign valid, the other not
@example(edits=[(0, "step_time_s", float("nan")), (1, "step_time_s", -0.0)])
def test_steps_validated_by_shape_give_every_error_jsonschema_gives(ingested, edits):
    """Whatever the steps hold, the result's violations are exactly those jsonschema reports validating every
    step (steps of one shape are validated once unless they have errors)."""
    import copy

    import jsonschema

    from tprimat.results.result import schema

    result = copy.deepcopy(ingested)
    steps = result["steps"]
    for index, field, drawn in edits:
        value = copy.deepcopy(drawn)  # a drawn {} is one object: put in a step, it would be mutated for later draws
        i = index % len(steps)
        if field == "whole":
            steps[i] = value
        elif isinstance(steps[i], dict) and field.startswith("-"):
            steps[i].pop(field[1:], None)
        elif isinstance(steps[i], dict):
            steps[i][field] = value
    # the file's layout (columns, here none) by the whole schema; every step, as a row, by the step schema
    stub = {"count": 0, **{name: [] for name in ("step", "step_time_s", "tokens", "loss", "lr", "grad_norm",
                                                 "memory_gib", "peak_memory_gib", "repeat", "warmup")}, "reported": None}
    everything = [(list(e.absolute_path), e.message)
                  for e in jsonschema.Draft202012Validator(schema()).iter_errors({**result, "steps": stub})]
    one_step = jsonschema.Draft202012Validator({"$defs": schema()["$defs"], "$ref": "#/$defs/step"})
    everything += [(["steps", i, *e.absolute_path], e.message) for i, step in enumerate(steps)
                   for e in one_step.iter_errors(step)]
    expected = [f"{'/'.join(str(p) for p in path) or '<root>'}: {message}"
                for path, message in sorted(everything, key=lambda e: e[0])]
    assert validate_result(result) == expected


@pytest.fixture(scope="module")
def ingested() -> dict:
    """A valid ingested result of 30 steps."""
    from tprimat.compose import compose
    from tprimat.ingest.build import Meta, ingest_text

    log = "".join(f"[2025-01-01 10:00:00] iteration {i:8d}/      30 | consumed samples: {256 * i:12d} | elapsed time "
                  f"per iteration (ms): {4000 + i}.0 | learning rate: 1.0E-05 | global batch size:   256 | lm loss: "
                  f"{9 - i / 10:.2f} | loss scale: 1.0 | grad norm: 1.0 | number of skipped iterations: 0 |\n"
                  for i in range(1, 31))
    result = ingest_text(log, "m.log", Meta(compose, ["world_size=8", "training.seq_length=128"]))
    assert len(result["steps"]) == 30 and validate_result(result) == []
    return result


def test_the_shipped_step_schema_is_validated_by_shape_and_other_keywords_are_not():
    import copy

    from tprimat.results import shapes
    from tprimat.results.result import schema

    full = copy.deepcopy(schema())
    defs, steps = full["$defs"], {"type": "array", "items": {"$ref": "#/$defs/step"}}  # the steps as rows
    assert shapes.exact_for(steps, defs)
    defs["step"]["properties"]["tokens"]["maximum"] = 10  # compares with 10, not 0: a kind cannot tell
    assert not shapes.exact_for(steps, defs)
    defs["step"]["properties"]["tokens"].pop("maximum")
    defs["number_or_null"]["enum"] = [1.0, None]
    assert not shapes.exact_for(steps, defs)
    defs["number_or_null"].pop("enum")
    steps["minItems"] = 1
    assert not shapes.exact_for(steps, defs)


STEP_NUMBERS = st.none() | st.integers(0, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
PRINTED = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-5, 5) | st.text(max_size=3)
BY_KEY = st.dictionaries(st.sampled_from(["0", "1", "7"]), st.floats(0.1, 9.0), min_size=1)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.fixed_dictionaries({
    "step": st.integers(0, 10**6), "step_time_s": STEP_NUMBERS, "tokens": st.none() | st.integers(0, 10**9),
    "loss": STEP_NUMBERS, "lr": STEP_NUMBERS, "grad_norm": STEP_NUMBERS, "memory_gib": STEP_NUMBERS,
    "peak_memory_gib": STEP_NUMBERS, "repeat": st.integers(0, 3), "warmup": st.booleans(),
    "reported": st.none() | st.fixed_dictionaries({}, optional={
        "tflops_per_gpu": PRINTED, "samples_per_s": PRINTED, "step_time_s_by_rank": BY_KEY})}), max_size=8))
def test_steps_are_stored_as_columns_and_read_back_as_the_same_rows(rows, tmp_path_factory):
    """A result's steps, written (one array per field and per printed name) and read back, are the same rows:
    a step without a reported object reads back with an empty one, unless no step has one (a live run)."""
    out = tmp_path_factory.mktemp("columns")
    write_result({"schema_version": SCHEMA_VERSION, "steps": rows}, out)
    stored = json.loads((out / "result.json").read_text())["steps"]
    assert stored["count"] == len(rows) and stored["loss"] == [r["loss"] for r in rows]
    assert stored["warmup"] == [r["warmup"] for r in rows]
    every_none = all(r["reported"] is None for r in rows)
    expected = [{**r, "reported": None if every_none else (r["reported"] or {})} for r in rows]
    assert read_result(out)["steps"] == expected
    assert [row_at(stored, i) for i in range(len(rows))] == expected  # one step at a time, as validation reads


def test_an_ingested_result_reads_back_as_written_and_a_broken_column_is_named(ingested, tmp_path):
    write_result(ingested, tmp_path)
    stored = json.loads((tmp_path / "result.json").read_text())
    assert stored["schema_version"] == "2.0" and stored["steps"]["count"] == 30
    assert stored["steps"]["reported"]["global_batch_size"] == [256] * 30  # what the log printed, a column
    back = read_result(tmp_path)
    assert back["steps"] == ingested["steps"] and validate_result(back) == []
    stored["steps"]["loss"].pop()  # 29 losses for 30 steps
    (tmp_path / "result.json").write_text(json.dumps(stored))
    with pytest.raises(ValueError, match="steps/loss: 29 values, but steps/count is 30"):
        read_result(tmp_path)
    check = subprocess.run([sys.executable, "-m", "tprimat", "check", str(tmp_path)], capture_output=True, text=True,
                           cwd=ROOT)
    assert check.returncode == 1 and "INVALID\n  steps/loss: 29 values, but steps/count is 30" in check.stdout
    assert validate_result(stored) == ["steps/loss: 29 values, but steps/count is 30"]


def test_a_result_of_schema_1_1_with_steps_as_objects_still_reads_and_validates(ingested, tmp_path):
    """Results written before schema 2.0 hold their steps as an array of objects."""
    old = {**ingested, "schema_version": "1.1"}
    (tmp_path / "result.json").write_text(json.dumps(old, indent=2))
    back = read_result(tmp_path)
    assert back["steps"] == ingested["steps"] and validate_result(back) == []


POOL = st.sampled_from([0.0, -0.0, 1.0, 1, True, False, None, float("nan"), float("inf"), 1024.0, 0.1, 3, "x", 2.5e-07])


@settings(max_examples=300, deadline=None)
@given(pool=st.lists(POOL, min_size=1, max_size=3), picks=st.lists(st.integers(0, 2), min_size=1, max_size=40))
def test_a_column_reads_back_as_json_writes_it(pool, picks):
    """A column reads back value for value, type for type, as json's own text of it does (non-finite as null):
    also for 1 == 1.0 == True, 0.0 == -0.0 and NaN, which equal each other (or not themselves) but print apart."""
    from tprimat.results.result import compact, finite

    values = [pool[i % len(pool)] for i in picks] + [2 ** 70] * (picks[0] == 2)  # an int beyond 64 bits too
    assert list(map(repr, json.loads(compact(values)))) == list(map(repr, json.loads(json.dumps(finite(values)))))


@settings(max_examples=300, deadline=None)
@given(columns=st.integers(1, 4).flatmap(lambda width: st.lists(
    st.lists(ODD_VALUES.filter(lambda v: not isinstance(v, (dict, list))), min_size=width, max_size=width),
    max_size=12)))
def test_steps_grouped_from_columns_are_the_groups_of_their_rows(columns):
    """Grouping steps by shape from their columns (each distinct value's kind once) gives the groups that
    grouping the rows themselves gives."""
    from tprimat.results import shapes

    rows = [dict(zip("abcd", values)) for values in columns]
    as_columns = [list(column) for column in zip(*columns)] if columns else []
    assert shapes.by_columns(as_columns) == shapes.by_shape(rows) or not columns


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 29), st.sampled_from(
    ["step", "step_time_s", "tokens", "loss", "lr", "memory_gib", "repeat", "warmup"]), ODD_VALUES), max_size=6))
def test_steps_validated_as_stored_columns_give_the_errors_of_their_rows(ingested, edits):
    """A result as stored (step columns), validated without making its rows, has the violations its rows have."""
    import copy

    result = copy.deepcopy(ingested)
    for index, field, drawn in edits:
        result["steps"][index % 30][field] = copy.deepcopy(drawn)  # a drawn {} is one object: never mutate it
    stored = {**result, "steps": json.loads(json.dumps(columns_of(result["steps"])))}
    assert validate_result(stored) == validate_result({**result, "steps": rows_of(stored["steps"])})


NUMBER_POOLS = st.sampled_from([
    [0.5, 1.5, 2.0, 3.0], [0.0, -0.0, 1.0], [-1.5, -2.0, -3.0], [1.0, float("inf")], [float("inf")],
    [float("-inf"), -1.0], [float("nan"), 1.0], [0.0, 0.5], [-0.5, 0.0], [1e300, 1e-300, 7.0],
    [0, 1, 2], [5, 7], [-3, 0], [-1, -9], [0], [True, False], [None], ["x", "y"]])


@settings(max_examples=300, deadline=None)
@given(pool=NUMBER_POOLS, picks=st.lists(st.integers(0, 3), min_size=1, max_size=30))
def test_a_column_s_kind_ids_are_equal_exactly_where_kinds_are(pool, picks):
    from tprimat.results import shapes

    column = [pool[i % len(pool)] for i in picks]
    ids = shapes.kind_ids(column)
    assert len(ids) == len(column)
    for a in range(len(column)):
        for b in range(len(column)):
            assert (ids[a] == ids[b]) == (shapes.kind(column[a]) == shapes.kind(column[b]))


def test_check_says_a_problem_of_many_steps_once(tmp_path, capsys):
    """Every step with negative tokens is one problem at many steps: one line naming how many and the first,
    not a line per step (a 277k-step result printed 277k lines)."""
    from tests.test_provenance import MEGATRON_DS
    from tprimat.cli import main
    from tprimat.compose import compose
    from tprimat.ingest.build import Meta, ingest_text
    from tprimat.results.result import write_result

    result = ingest_text(MEGATRON_DS, "mds.log", Meta(compose, ["world_size=4"], warmup_steps=1))
    path = write_result(result, tmp_path)
    stored = json.loads(path.read_text())
    stored["steps"]["tokens"] = [-1] * stored["steps"]["count"]
    stored["steps"]["loss"][2] = "high"
    path.write_text(json.dumps(stored))
    with pytest.raises(SystemExit) as exit_code:
        main(["check", str(path)])
    lines = capsys.readouterr().out.splitlines()
    assert exit_code.value.code == 1 and lines[0] == f"{path}: INVALID"
    assert "  steps/*/tokens: -1 is less than the minimum of 0 (at 4 steps, the first steps/0)" in lines
    assert any(line.startswith("  steps/2/loss: 'high' is not") for line in lines)  # one step: as it is
    assert len(lines) == 3


def test_a_failed_result_tprimat_writes_without_a_spec_passes_check(tmp_path):
    """A scheduler failure or a spec that could not be built is written with spec null: check accepts it (the
    value checks are for results with status ok)."""
    from tprimat.results.result import check_result, write_unsuccessful

    write_unsuccessful(tmp_path, "failed", "the scheduler ended the job (TIMEOUT)")
    assert check_result(json.loads((tmp_path / "result.json").read_text())) == []


def test_compare_reads_neither_a_runs_hidden_folders_nor_json_of_another_kind(tmp_path):
    """A spawned run leaves .ranks/launch.json (its spec) and .ranks/records.json (its steps) beside result.json:
    not results. A DeepSpeed config is JSON of another kind: noted, not read, not a failure."""
    from tprimat.compare.load import load

    (tmp_path / "run" / ".ranks").mkdir(parents=True)
    (tmp_path / "run" / ".ranks" / "launch.json").write_text(json.dumps({"spec": {}, "plan": {}}))
    (tmp_path / "run" / ".ranks" / "records.json").write_text(json.dumps({"steps": []}))
    (tmp_path / "run" / "ds_config.json").write_text(json.dumps({"train_batch_size": 8}))
    report = load([str(tmp_path)])
    assert report.skipped == [] and report.results == []
    assert [n for n in report.notes if "ds_config.json" in n and "not read" in n] and len(report.notes) == 1
