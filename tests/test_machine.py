"""The suite's set-up beside the tests (tests/machine.py): a test waits for the step it needs, reads the lines each
step wrote, and a set-up that ended without a step it waits for is an error at once, not a wait to the deadline."""

import json
import subprocess
import sys
import threading
import time

import pytest

from tests import machine


def test_a_step_is_waited_for_read_back_and_an_ended_set_up_without_it_is_an_error(tmp_path, monkeypatch):
    setup = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        monkeypatch.setenv(machine.FOLDER_ENV, str(tmp_path))
        monkeypatch.setenv(machine.PID_ENV, str(setup.pid))
        line = "packages: nothing to install: ready (0 s)"
        partial = tmp_path / "packages.json.partial"
        later = threading.Timer(0.5, lambda: (partial.write_text(json.dumps(line)), partial.replace(partial.with_suffix(""))))
        later.start()
        started = time.monotonic()
        assert machine.wait("packages") == [line] and time.monotonic() - started >= 0.4  # waited for it
        later.join()
        assert machine.running(setup.pid)
    finally:
        setup.kill()
    deadline = time.monotonic() + 30
    while machine.running(setup.pid) and time.monotonic() < deadline:  # killed, not yet reaped: a zombie
        time.sleep(0.05)
    assert not machine.running(setup.pid)
    with pytest.raises(RuntimeError, match="ended without its deepspeed_op step"):
        machine.wait()
    setup.wait()


def test_without_a_set_up_nothing_is_waited_for(monkeypatch):
    monkeypatch.delenv(machine.FOLDER_ENV, raising=False)
    assert machine.wait() == []
