"""How Slipway's processes stop (slipway.core.lifecycle): real signals to this process and to children, and the
check that no other production file installs a signal handler or sets a process link itself."""

from __future__ import annotations

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
        while not marker.exists() and time.monotonic() < deadline:
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
