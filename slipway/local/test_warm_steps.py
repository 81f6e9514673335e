"""The warm step process: kfp.local's real tasks forked from it, run as a cold step process would run them.

Each test runs a small pipeline of lightweight components through run_local (kfp.local's SubprocessRunner, the
console, the real warm process); the components write what they saw to a file, since they record no lineage."""


import io
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

import psutil
import pytest
from kfp import dsl

from slipway.core import lifecycle
from slipway.local import warm as warm_steps
from slipway.local.runner import run_local
from slipway.local.warm.client import WarmTask, call, lightweight_task


@dsl.component(base_image="python:3.11", install_kfp_package=False)  # as Slipway's components are
def report(path: str, exit_code: int = 0, kill: bool = False):
    """Write what this step process sees, then end as asked (an exit status, or killed by a signal)."""
    import json
    import os
    import sys
    import tempfile

    import psutil

    parent = psutil.Process(os.getppid())
    seen = {"tensorflow_imported": "tensorflow" in sys.modules, "parent": " ".join(parent.cmdline()),
            "marker": os.environ.get("WARM_TEST_MARKER"), "tmpdir": tempfile.gettempdir(), "cwd": os.getcwd(),
            "pid": os.getpid()}
    with open(path, "w") as f:
        json.dump(seen, f)
    print("step output line", flush=True)
    if kill:
        os.kill(os.getpid(), 9)
    if exit_code:
        sys.exit(exit_code)


def _pipeline(path: str, exit_code: int = 0, kill: bool = False):
    @dsl.pipeline(name="warm-test")
    def warm_test():
        report(path=path, exit_code=exit_code, kill=kill)

    return warm_test


def _run(tmp_path: Path, warm=None, **kwargs) -> "tuple[dict, dict, str]":
    seen_path = tmp_path / "seen.json"
    before = dict(os.environ)
    summary = run_local(_pipeline(str(seen_path), **kwargs), {}, tmp_path / "out", warm=warm)
    assert dict(os.environ) == before  # the run's TMPDIR (removed with it) and context do not outlive it here
    seen = json.loads(seen_path.read_text()) if seen_path.exists() else {}
    log = (Path(summary["logs"]) / "report.log").read_text()
    return summary, seen, log


@pytest.fixture
def marker(monkeypatch):
    # set after the warm process started: a step must see the task's environment, not the warm process's
    monkeypatch.setenv("WARM_TEST_MARKER", "from-the-run")


def test_a_step_is_forked_from_the_warm_process_with_the_tasks_environment_and_streams(tmp_path, marker):
    with warm_steps.started() as warm:
        assert call(warm.socket, f"{__name__}:check_answer", ["good"], after=("tensorflow",))[0]
        summary, seen, log = _run(tmp_path, warm=warm)
    assert summary["error"] is None, summary  # (no lineage recorded: the step counts as not run, not failed)
    assert "slipway.local.warm.server" in seen["parent"]  # its parent is the warm process, not kfp.local's shell
    assert seen["tensorflow_imported"]  # before the step imported anything
    assert seen["marker"] == "from-the-run"
    assert seen["tmpdir"].startswith(str(tmp_path / "out" / "tmp"))  # the run's scratch space, as a cold step
    assert "step output line" in log
    assert (Path(summary["logs"]) / "warm-steps.log").exists()
    assert not psutil.pid_exists(seen["pid"])


def test_switched_off_every_step_starts_cold(tmp_path, monkeypatch, marker):
    monkeypatch.setenv(warm_steps.ENV_SWITCH, "0")
    summary, seen, _ = _run(tmp_path)
    assert summary["error"] is None, summary  # (no lineage recorded: the step counts as not run, not failed)
    assert "kfp.dsl.executor_main" in seen["parent"] or seen["parent"].startswith("sh")
    assert not seen["tensorflow_imported"]
    assert seen["marker"] == "from-the-run"


# killed: kfp.local's shell reports 128 + 9, as for a cold step
@pytest.mark.parametrize(("kwargs", "status"), [({"exit_code": 3}, "exit status 3"),
                                                ({"kill": True}, "exit status 137")])
def test_a_warm_step_ends_with_its_own_exit_status_or_signal(tmp_path, capsys, kwargs, status):
    summary, seen, log = _run(tmp_path, **kwargs)
    assert summary["error"], summary
    assert "slipway.local.warm.server" in seen["parent"]
    assert "step output line" in log
    out = capsys.readouterr().out
    assert f"report           failed: {status} (the step printed no error)" in out, out


def test_a_step_runs_cold_when_the_warm_process_is_gone(tmp_path, marker):
    with warm_steps.started() as warm:
        _kill_warm_process(warm)
        summary, seen, log = _run(tmp_path, warm=warm)
    assert summary["error"] is None, summary  # (no lineage recorded: the step counts as not run, not failed)
    assert "(warm step process unavailable" in log
    assert not seen["tensorflow_imported"]
    assert seen["marker"] == "from-the-run"


def _kill_warm_process(warm) -> None:
    """The warm process killed once it listens, its socket left behind (as a crash leaves it)."""
    _wait_listening(warm)
    zygote = _warm_process()
    zygote.kill()
    zygote.wait(10)


def _wait_listening(warm) -> None:
    deadline = time.monotonic() + 30
    while not os.path.exists(warm.socket):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def check_answer(value: str) -> None:
    """A target for call(): fails in one line on "bad", says which process it ran in otherwise."""
    import sys

    if value == "bad":
        raise ValueError("the value is bad")
    if "tensorflow" not in sys.modules:
        raise RuntimeError("tensorflow was not imported before the call")


def test_a_call_runs_in_a_copy_after_the_modules_it_waits_for_and_reports_in_one_line():
    lifecycle.adopt_orphans()  # as a run does: a copy the warm process left unreaped would be this process's zombie
    with warm_steps.started() as warm:
        assert warm is not None
        target = f"{__name__}:check_answer"
        assert call(warm.socket, target, ["good"], after=("tensorflow",)) == (True, "", "")
        assert call(warm.socket, target, ["bad"], after=("tensorflow",)) == (False, "ValueError", "the value is bad")
        # the facade: the same call, by the function (it fails in a fork of this process, without TensorFlow)
        assert warm_steps.call(warm, check_answer, ["good"], after=("tensorflow",)) == (True, "", "")
    assert not [child for child in psutil.Process().children() if child.status() == psutil.STATUS_ZOMBIE]


def _warm_process() -> psutil.Process:
    return next(p for p in psutil.Process().children() if "slipway.local.warm.server" in " ".join(p.cmdline()))


def _gone(proc: psutil.Process) -> bool:
    return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE


def _task(warm, source: str, *args: str, log: "IO[str] | None" = None) -> WarmTask:
    """A step started as a run starts one: kfp.local's command for a Python component whose module is source."""
    command = ["sh", "-ec", f"... ephemeral_component.py ... {sys.executable} -m kfp.dsl.executor_main ...", source,
               *args]
    task = warm.launch(command, None, log or io.StringIO())
    assert task is not None
    return task


def test_the_copy_runs_kfps_executor_with_the_tasks_arguments():
    with warm_steps.started() as warm, _task(warm, "", "--help") as task:
        output = task.stdout.read()
    assert task.returncode == 0
    assert "--component_module_path" in output  # kfp's executor's own usage, on the task's stdout


def test_what_a_run_launches_in_the_warm_process_is_kfps_command_for_a_python_component():
    spec = report.component_spec.implementation.container
    command = [*spec.command, *spec.args]
    source, args = lightweight_task(command)
    assert "def report(" in source and args == ["--executor_input", command[-3], "--function_to_execute", "report"]

    @dsl.component(base_image="python:3.11", install_kfp_package=False, packages_to_install=["psutil"])
    def installs(path: str):
        pass

    with_packages = installs.component_spec.implementation.container
    assert lightweight_task([*with_packages.command, *with_packages.args]) is None  # the shell installs them first
    assert lightweight_task(["podman", "run", "--rm", "image", "python", "-m", "kfp.dsl.executor_main"]) is None


def _hung_step(tmp_path: Path, warm) -> "tuple[WarmTask, psutil.Process]":
    """A task whose component module never finishes importing (as a step hung in its work); the task and the copy
    running it."""
    ready = tmp_path / "ready"
    task = _task(warm, f"import pathlib, time\npathlib.Path({str(ready)!r}).write_text('x')\ntime.sleep(300)\n",
                 "--executor_input", "{}", "--function_to_execute", "f")
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    copies = _warm_process().children()
    assert [copy.pid for copy in copies] == [task.pid]
    return task, copies[0]


def test_a_step_ended_by_a_signal_reports_it_as_kfps_shell_did(tmp_path):
    with warm_steps.started() as warm:
        task, copy = _hung_step(tmp_path, warm)
        copy.send_signal(signal.SIGTERM)
        with task:
            assert 'Loading KFP component "f"' in task.stdout.read()  # kfp's executor's lines, on the task's pipe
        assert task.returncode == 128 + signal.SIGTERM  # as `sh -ec` reported a step it ran that SIGTERM ended
        assert _gone(copy)


def test_stopping_the_warm_process_stops_the_steps_it_forked(tmp_path):
    with warm_steps.started() as warm:
        task, copy = _hung_step(tmp_path, warm)
        zygote = _warm_process()
    assert _gone(zygote)
    assert _gone(copy)  # stopped and reaped by the warm process before it ended
    assert task.wait() != 0
    assert task.log.getvalue() == "(the warm step process ended while the step ran)\n"  # the step's log says so
    assert not os.path.exists(warm.socket)


def test_a_step_the_warm_process_cannot_take_is_left_to_start_cold_and_its_log_says_why():
    with warm_steps.started() as warm:
        _kill_warm_process(warm)
        log = io.StringIO()
        assert warm.launch(["sh", "-ec", "ephemeral_component.py -m kfp.dsl.executor_main", "", "--help"], None,
                           log) is None
    assert log.getvalue().startswith("(warm step process unavailable: ")


def test_a_call_the_warm_process_cannot_take_raises_oserror_for_the_caller_to_fall_back():
    with warm_steps.started() as warm:
        _kill_warm_process(warm)
        with pytest.raises(OSError):  # run_request then checks the module in a fork of the CLI instead
            call(warm.socket, f"{__name__}:check_answer", ["good"])


def test_what_is_preloaded_comes_from_the_components_list_after_what_every_step_imports():
    from slipway.components import COMPONENTS
    from slipway.local.warm import server

    names = server.preload_names()
    # what the module check waits for (TFT without its Beam part) comes right after TensorFlow
    assert names[:4] == ["kfp.dsl.executor_main", "slipway.core.step", "tensorflow", "tensorflow_transform"]
    assert [name.split(".")[2] for name in names if name.startswith("slipway.components.")][::2] == list(COMPONENTS)
    for library, component in [("tensorflow_data_validation", "validate"), ("tensorflow_transform.beam", "transform"),
                               ("tensorflow_model_analysis", "evaluate")]:
        assert names.index(library) < names.index(f"slipway.components.{component}.step")
    assert len(names) == len(set(names)) == 4 + 3 + 2 * len(COMPONENTS)
    due = [name for name in names if server.first_step_modules_imported(name)]
    assert due == [f"slipway.components.{next(iter(COMPONENTS))}.executor"]


def libraries_seen(path: str) -> None:
    """A target for call(): which of the libraries the warm process preloads this copy has."""
    import json
    import sys

    libraries = ("tensorflow", "tensorflow_transform", "tensorflow_data_validation")
    Path(path).write_text(json.dumps({name: name in sys.modules for name in libraries}))


def test_the_module_check_and_the_first_step_start_before_the_libraries_after_them(tmp_path):
    """The module check is forked once TensorFlow and TFT are in, and the run's first step, which comes right after
    it, is forked before the warm process starts on TFDV (a fork waits for the import in hand)."""
    seen_by_check, seen_by_step = tmp_path / "check.json", tmp_path / "step.json"
    module = tmp_path / "component.py"
    module.write_text(f"import os, sys\nsys.path.insert(0, {str(Path(__file__).parent.parent.parent)!r})\n"
                      f"from {__name__} import libraries_seen\nlibraries_seen({str(seen_by_step)!r})\n"
                      "os._exit(0)\n")
    with warm_steps.started() as warm:
        outcome = call(warm.socket, f"{__name__}:libraries_seen", [str(seen_by_check)],
                       after=warm_steps.MODULE_FILE_IMPORTS)
        assert outcome == (True, "", "")
        with _task(warm, module.read_text(), "--executor_input", "{}", "--function_to_execute", "f") as step:
            step.stdout.read()
        assert step.returncode == 0
    expected = {"tensorflow": True, "tensorflow_transform": True, "tensorflow_data_validation": False}
    assert json.loads(seen_by_check.read_text()) == expected
    assert json.loads(seen_by_step.read_text()) == expected


def test_a_call_returns_with_its_copys_report_before_the_warm_process_reports_its_end():
    """The warm process tells how a copy ended only once it has reaped it, which while it imports waits for the
    module in hand: a call does not wait for that line, its copy's report is the answer."""
    import socket
    import threading

    from slipway.core.lifecycle import Outcome
    from slipway.local.warm.protocol import Reply, receive_request

    folder = tempfile.mkdtemp(prefix="slipway-test-")  # short: a socket path has 107 bytes at most (tmp_path's not)
    path = os.path.join(folder, "s.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    done = threading.Event()

    def answer_and_hold() -> None:  # as the warm process and a copy answer, the connection left open
        conn, _ = listener.accept()
        request = receive_request(conn)
        for fd in request["fds"]:
            os.close(fd)
        conn.sendall(Reply(pid=12345).line() + Reply.of(Outcome(False, "ValueError", "bad")).line())
        done.wait(60)
        conn.close()

    server = threading.Thread(target=answer_and_hold, daemon=True)
    server.start()
    try:
        assert call(path, "any:thing", []) == (False, "ValueError", "bad")
        assert server.is_alive()  # answered while the connection is still open
    finally:
        done.set()
        server.join(10)
        listener.close()
        shutil.rmtree(folder)


def test_the_reply_lines_read_back_as_written_and_make_a_calls_outcome():
    import io

    from slipway.core.lifecycle import Outcome
    from slipway.local.warm.protocol import Reply, call_outcome

    failed = Outcome(False, "ValueError", "the value is bad\nsecond line")
    replies = [Reply(pid=7), Reply.of(failed), Reply.ended(1 << 8)]
    stream = io.StringIO(b"".join(reply.line() for reply in replies).decode())
    assert [Reply.read(stream) for _ in replies] == replies and Reply.read(stream) is None
    assert call_outcome(replies) == failed
    assert call_outcome([Reply(pid=7), Reply.of(Outcome(True)), Reply.ended(0)]) == (True, "", "")
    assert call_outcome([Reply(pid=7), Reply(signal=9)]) == (False, "", "signal 9")
    with pytest.raises(OSError):  # the warm process ended before it forked the copy
        call_outcome([])


def fails_on_bad(value: str) -> None:
    if value == "bad":
        raise ValueError("the value is bad")


def test_a_call_without_a_warm_process_runs_in_a_fork_of_this_one():
    assert warm_steps.call(None, fails_on_bad, ["good"]) == (True, "", "")
    assert warm_steps.call(None, fails_on_bad, ["bad"]) == (False, "ValueError", "the value is bad")
