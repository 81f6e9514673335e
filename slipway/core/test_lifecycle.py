"""How Slipway's processes stop (slipway.core.lifecycle): real signals to this process and to children, and the
check that no other production file installs a signal handler, sets a process link or sends SIGKILL itself."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slipway.core import lifecycle

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = [ROOT / "slipway", ROOT / "components", ROOT / "pipelines"]


class Stopped(Exception):
    pass


def test_a_signal_raises_in_the_block_and_the_previous_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Stopped, match="SIGTERM"), lifecycle.raise_on_signals(lambda s: Stopped(s.name)) as installed:
        assert installed
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_handler_gets_the_signal_and_then_previous_chains_to_the_default_exit():
    seen = []
    with pytest.raises(SystemExit) as exit_, \
            lifecycle.on_signals(seen.append, (signal.SIGUSR1,), then_previous=True):
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(5)
    assert seen == [signal.SIGUSR1]
    assert exit_.value.code == 128 + signal.SIGUSR1  # what the default action's status would be


def test_then_previous_calls_a_previous_handler_and_an_ignored_signal_stays_ignored():
    calls = []
    outer = signal.signal(signal.SIGUSR2, lambda number, frame: calls.append(("previous", number)))
    try:
        with lifecycle.on_signals(lambda s: calls.append(("mine", s)), (signal.SIGUSR2,), then_previous=True):
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(0.2)
        assert calls == [("mine", signal.SIGUSR2), ("previous", signal.SIGUSR2)]
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        with lifecycle.on_signals(lambda s: calls.append(("again", s)), (signal.SIGUSR2,), then_previous=True):
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(0.2)
        assert calls[-1] == ("again", signal.SIGUSR2)
    finally:
        signal.signal(signal.SIGUSR2, outer)


def test_off_the_main_thread_nothing_is_installed():
    result = {}

    def run():
        with lifecycle.raise_on_signals(lambda s: Stopped()) as installed:
            result["installed"] = installed

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert result == {"installed": False}


def test_a_child_that_dies_with_its_parent_gets_sigterm_when_the_parent_is_killed(tmp_path):
    """parent (killed by SIGKILL) -> child started with die_with_parent, which writes a file on SIGTERM."""
    marker = tmp_path / "terminated"
    child = ("import signal, sys, time\n"
             f"signal.signal(signal.SIGTERM, lambda *a: (open({str(marker)!r}, 'w').write('x'), sys.exit(0)))\n"
             "print('ready', flush=True)\ntime.sleep(60)\n")
    parent = ("import subprocess, sys, time\nfrom slipway.core import lifecycle\n"
              f"child = subprocess.Popen([sys.executable, '-c', {child!r}], preexec_fn=lifecycle.die_with_parent,"
              " stdout=sys.stdout)\ntime.sleep(60)\n")
    process = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "ready"
        process.kill()
        deadline = time.monotonic() + 20
        # the handler creates the file, then writes to it: wait for the write, not only the file (CI once read it
        # between the two)
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.read_text() == "x"
    finally:
        process.kill()
        process.wait()


def test_only_the_lifecycle_module_installs_handlers_or_sets_process_links():
    pattern = re.compile(r"\bsignal\.signal\(|\.prctl\(")
    found = sorted(str(path.relative_to(ROOT)) for folder in PRODUCTION for path in folder.rglob("*.py")
                   if not path.name.startswith("test_") and "testing" not in path.name
                   and pattern.search(path.read_text(encoding="utf-8")))
    assert found == ["slipway/core/lifecycle.py"]


def _sends_sigkill(tree: ast.AST) -> list[int]:
    """The lines that name SIGKILL (signal.SIGKILL, or SIGKILL imported) or call .kill() (a Popen's, psutil's) or
    os.kill / os.killpg with 9."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name) and getattr(node, "attr", getattr(node, "id", "")) == "SIGKILL":
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("kill", "killpg"):
            bare = node.func.attr == "kill" and not node.args and not node.keywords
            nine = len(node.args) == 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == 9
            if bare or nine:
                lines.append(node.lineno)
    return sorted(set(lines))


def test_only_the_lifecycle_module_sends_sigkill():
    """Every "SIGTERM, then SIGKILL" goes through lifecycle.stop / stop_all / kill (the grace, the reaping)."""
    found = {str(path.relative_to(ROOT)): lines for folder in PRODUCTION for path in folder.rglob("*.py")
             if not path.name.startswith("test_") and "testing" not in path.name
             and (lines := _sends_sigkill(ast.parse(path.read_text(encoding="utf-8"))))}
    assert list(found) == ["slipway/core/lifecycle.py"], found


def test_the_sigkill_check_sees_each_way_of_sending_it():
    code = ("os.killpg(p.pid, signal.SIGKILL)\nprocess.kill()\nos.kill(pid, 9)\nfrom signal import SIGKILL\n"
            "send(p, SIGKILL)\nlifecycle.kill(p)\nos.kill(pid, signal.SIGTERM)\n")
    assert _sends_sigkill(ast.parse(code)) == [1, 2, 3, 5]


def _child(code: str, **kwargs) -> subprocess.Popen:
    """A Python child that runs code (its handlers), prints "ready", then sleeps; returned once it is ready."""
    script = ("import os, signal, subprocess, sys, time\n" + code + "\nprint('ready', flush=True)\ntime.sleep(60)\n")
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, **kwargs)
    process.ready_line = process.stdout.readline().split()  # what code printed before "ready", then "ready"
    assert process.ready_line[-1:] == ["ready"]
    return process


IGNORES_SIGTERM = "signal.signal(signal.SIGTERM, signal.SIG_IGN)"


def test_a_child_that_ignores_sigterm_is_sigkilled_after_the_grace_and_reaped():
    process = _child(IGNORES_SIGTERM)
    started = time.monotonic()
    assert lifecycle.stop(process, grace_s=1) is False
    assert time.monotonic() - started >= 1
    assert process.returncode == -signal.SIGKILL


def test_a_child_that_ends_on_sigterm_is_not_sigkilled():
    process = _child("")
    assert lifecycle.stop(process, grace_s=30) is True
    assert process.returncode == -signal.SIGTERM
    assert lifecycle.stop(process, grace_s=30) is True  # ended already: nothing sent


def test_a_pid_is_stopped_the_same_way_and_a_child_of_this_process_is_reaped():
    ends, ignores = _child(""), _child(IGNORES_SIGTERM)
    assert lifecycle.stop(ends.pid, grace_s=30) is True
    assert lifecycle.stop(ignores.pid, grace_s=1) is False
    for process in (ends, ignores):
        assert not lifecycle.alive(process.pid)
        with pytest.raises(ChildProcessError):  # reaped by stop
            os.waitpid(process.pid, os.WNOHANG)


def _group(leader_code: str, member_code: str) -> tuple[subprocess.Popen, int]:
    """A leader in a session of its own with one member of its group (a grandchild of this process)."""
    member = f"import signal, time\n{member_code}\nprint('ready', flush=True)\ntime.sleep(60)\n"
    leader = _child(f"{leader_code}\nm = subprocess.Popen([sys.executable, '-c', {member!r}], stdout=subprocess.PIPE,"
                    " text=True)\nassert m.stdout.readline().strip() == 'ready'\nprint(m.pid, end=' ')",
                    start_new_session=True)
    return leader, int(leader.ready_line[0])


def _gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while lifecycle.alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_process_group_gets_sigterm_together():
    leader, member = _group("", "")
    assert lifecycle.stop(leader, grace_s=30, group=True) is True
    assert leader.returncode == -signal.SIGTERM
    assert _gone(member)


def test_a_process_group_that_ignores_sigterm_is_sigkilled_together():
    leader, member = _group(IGNORES_SIGTERM, IGNORES_SIGTERM)
    assert lifecycle.stop(leader, grace_s=1, group=True) is False
    assert leader.returncode == -signal.SIGKILL
    assert _gone(member)


def test_kill_is_sigkill_at_once():
    process = _child(IGNORES_SIGTERM)
    lifecycle.kill(process)
    assert process.returncode == -signal.SIGKILL
    lifecycle.kill(process)  # ended and reaped already: nothing sent


def test_stop_all_sigkills_only_those_still_running_after_the_grace():
    ends, ignores = _child(""), _child(IGNORES_SIGTERM)
    started = time.monotonic()
    assert lifecycle.stop_all([ends.pid, ignores.pid, 2 ** 22 + 1], grace_s=1) == [ignores.pid]
    assert time.monotonic() - started < 10
    for process in (ends, ignores):
        assert not lifecycle.alive(process.pid)


def test_stop_all_without_a_grace_waits_for_each_to_end_and_never_sigkills():
    slow = _child("signal.signal(signal.SIGTERM, lambda *a: (time.sleep(1.5), sys.exit(0)))")
    started = time.monotonic()
    assert lifecycle.stop_all([slow.pid], grace_s=None) == []
    assert time.monotonic() - started >= 1.4
    assert not lifecycle.alive(slow.pid)


def test_a_child_that_exits_between_the_checks_is_reaped_not_left_a_zombie(monkeypatch):
    """alive(pid) asks waitpid first, then /proc: a child of ours that exits in between is seen as a zombie there and
    must be reaped then, or a parent that ends believing it gone leaves the zombie behind (serving's first worker
    stopping the others did, under load)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    real_waitpid, calls = os.waitpid, []

    def first_says_running(wanted, options):  # the moment before it exited, as the race has it
        calls.append(wanted)
        return (0, 0) if len(calls) == 1 else real_waitpid(wanted, options)

    monkeypatch.setattr(lifecycle.os, "waitpid", first_says_running)
    assert lifecycle.alive(pid) is False
    monkeypatch.undo()
    assert calls == [pid, pid]  # it asked again once /proc showed the zombie
    with pytest.raises(ChildProcessError):  # reaped: no child of that pid is left to this process
        os.waitpid(pid, os.WNOHANG)


def test_call_in_fork_keeps_what_the_work_imports_in_the_copy():
    assert "xdrlib_marker" not in sys.modules

    def work() -> None:
        sys.modules["xdrlib_marker"] = sys  # as an import would
        import wave  # noqa: F401

    had_wave = "wave" in sys.modules
    assert lifecycle.call_in_fork(work) == (True, "", "")
    assert "xdrlib_marker" not in sys.modules and ("wave" in sys.modules) == had_wave


def test_call_in_fork_sends_back_the_failure_as_its_class_and_one_message():
    def fails() -> None:
        raise ValueError("module file m.py: does not define build_keras_model")

    assert lifecycle.call_in_fork(fails) == (False, "ValueError",
                                             "module file m.py: does not define build_keras_model")


def test_call_in_fork_names_the_exit_status_of_a_copy_that_ends_without_saying():
    assert lifecycle.call_in_fork(lambda: os._exit(7)) == (False, "", "exit status 7")
    assert lifecycle.call_in_fork(lambda: os.kill(os.getpid(), signal.SIGKILL)) == (False, "", "exit status -9")
