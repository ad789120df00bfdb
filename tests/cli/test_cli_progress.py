"""The progress display: one redrawn line on a terminal, plain lines elsewhere."""

import io
import os
import pty
import subprocess
import sys

import pytest

from pytorchrl.tools.progress import ProgressDisplay, format_duration, format_progress, format_status

from cli_helpers import env, tiny, write_config

METRICS = {"Scheme/EnvSteps": 5000, "Time/Elapsed": 12.0, "Time/FPS": 1000.0, "Episodes/TrainReward": 42.5,
           "Episodes/TestReward": float("nan"), "Algorithm/Loss": 0.25, "Scheme/PolicyLag": 1.5}


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_durations():
    assert [format_duration(s) for s in (0, 59.6, 61, 3600 + 62, None, float("inf"), -1)] == \
        ["0:00", "1:00", "1:01", "1:01:02", "--:--", "--:--", "--:--"]


def test_plain_line_has_steps_speed_return_lag_and_time_left():
    line = format_progress(METRICS, 10_000)
    assert line.startswith("[    12s] steps 5,000/10,000 (50%) | 1,000 steps/s | train return 42.5")
    assert "test return" not in line                # nan: no evaluation yet
    assert "policy lag 1.5" in line and line.endswith("0:05 left")


def test_status_line_drops_the_least_useful_parts_to_fit():
    full = format_status(5000, 10_000, 1000.0, 12.0, 42.5, 500.0, 1.5)
    assert full == " 50% 5,000/10,000 steps | 1,000 steps/s | return 42.5 | test 500.0 | lag 1.5 | " \
                   "0:12 elapsed, 0:05 left"
    narrow = format_status(5000, 10_000, 1000.0, 12.0, 42.5, 500.0, 1.5, width=70)
    assert narrow == " 50% 5,000/10,000 steps | return 42.5 | 0:12 elapsed, 0:05 left"
    assert format_status(0, 100, 0.0, 0.0).endswith("0:00 elapsed, --:-- left")


def test_terminal_gets_one_redrawn_line_and_messages_above_it():
    stream = Terminal()
    display = ProgressDisplay(10_000, stream)
    assert display.live
    display.status("a" * 500)
    display.log(METRICS, "status 2")
    display.message("live change at step 10")
    display.close()
    text = stream.getvalue()
    width = display.width
    assert text.startswith("\r" + "a" * width + "\x1b[K")          # never wider than the terminal
    assert "\rstatus 2\x1b[K" in text
    assert "\r\x1b[Klive change at step 10\n\rstatus 2\x1b[K" in text  # the status line comes back
    assert text.endswith("\n") and text.count("\n") == 2


def test_files_get_plain_lines():
    stream = io.StringIO()
    display = ProgressDisplay(10_000, stream)
    assert not display.live
    display.status("never shown")
    display.log(METRICS, "never shown")
    display.message("done")
    display.close()
    assert stream.getvalue() == format_progress(METRICS, 10_000) + "\ndone\n"
    quiet = io.StringIO()
    display = ProgressDisplay(10_000, quiet, mode="quiet")
    display.log(METRICS)
    display.message("done")
    assert quiet.getvalue() == "done\n"
    with pytest.raises(ValueError, match="progress mode"):
        ProgressDisplay(1, quiet, mode="fancy")


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals")
def test_train_on_a_terminal_redraws_its_status_line(tmp_path):
    # A real pseudo-terminal: what a user sees when running `pytorchrl train` by hand.
    conf = write_config(tmp_path, tiny(learner={"target_steps": 3000, "log_every": 0.2}, env={"test_env": False}))
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "pytorchrl.cli", "train", conf, "--run-dir",
                             str(tmp_path / "run")], stdin=child, stdout=child, stderr=child, cwd=tmp_path,
                            env=env(), close_fds=True)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 4096)
        except OSError:      # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(main)
    text = b"".join(chunks).decode()
    assert proc.returncode == 0, text
    # The terminal turns "\n" into "\r\n"; status lines are redrawn with a bare "\r".
    redraws = [part for part in text.split("\r") if "steps/s" in part and "\x1b[K" in part]
    assert len(redraws) >= 2, text
    assert "elapsed" in redraws[-1] and "left" in redraws[-1]
    assert "done: " in text and "[" not in text.split("done: ")[0].replace("[K", "")   # no plain lines


def test_a_closed_pipe_silences_the_display_but_not_the_run():
    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    display = ProgressDisplay(10_000, ClosedPipe())
    display.message("first")          # `pytorchrl train ... | head -1`: the reader is gone
    display.log(METRICS)
    display.close()
    assert display.mode == "quiet"
