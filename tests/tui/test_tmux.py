"""The real `tracediff compare` in a terminal (tmux): the TUI opens, shows the verdict, q exits."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACEDIFF = Path(sys.executable).with_name("tracediff")


def _wait_for(pred, timeout: float) -> bool:  # noqa: ANN001
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_compare_opens_tui_in_a_terminal_and_q_exits(tmp_path: Path) -> None:
    sock = f"tracediff-test-{uuid.uuid4().hex[:8]}"  # own server: never touches the user's tmux
    done = tmp_path / "exit_code"
    tmux = ["tmux", "-L", sock]
    # a fresh tmux server may create the pane at 80x24 and resize it a moment later: start the
    # app only once the pty has its final size, so the test does not race the resize
    cmd = (
        f'cd {ROOT} && until [ "$(stty size)" = "40 120" ]; do sleep 0.1; done; '
        f"{TRACEDIFF} compare samples/g_good.arrow samples/g_bad.arrow; "
        f"echo $? > {done}; sleep 30"
    )
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", "120", "-y", "40", "-s", "td", cmd], check=True
    )
    try:

        def screen() -> str:
            return subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", "td"], capture_output=True, text=True
            ).stdout

        # the whole first frame is out once the timeline (the last widget) is drawn
        assert _wait_for(lambda: "GPU 0 base" in screen(), 30), screen()
        text = screen()
        assert "base 5.570 ms → head 3.622 ms per cycle" in text
        assert "change -1.947 ms (-35.0 %)" in text
        assert "attribution · 34/34" in text and "timeline · cycle 0" in text
        subprocess.run([*tmux, "send-keys", "-t", "td", "Right"], check=True)
        assert _wait_for(lambda: "timeline · cycle 1" in screen(), 5), screen()
        subprocess.run([*tmux, "send-keys", "-t", "td", "q"], check=True)
        assert _wait_for(done.exists, 10), screen()
        assert _wait_for(lambda: done.read_text().strip() != "", 2)
        assert done.read_text().strip() == "0"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_host_only_capture_in_an_80x24_terminal(tmp_path: Path) -> None:
    """`tracediff compare` on two GPU-less captures, in a real 80x24 terminal: no error, the
    phases' names on screen, the timeline says why it is empty; `e` says why it does nothing."""
    sock = f"tracediff-test-{uuid.uuid4().hex[:8]}"
    done = tmp_path / "exit_code"
    tmux = ["tmux", "-L", sock]
    d = "tests/data/capture-hostonly"
    cmd = (
        f'cd {ROOT} && until [ "$(stty size)" = "24 80" ]; do sleep 0.1; done; '
        f"{TRACEDIFF} compare {d}/base/report.sqlite {d}/slow/report.sqlite; "
        f"echo $? > {done}; sleep 30"
    )
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", "80", "-y", "24", "-s", "td", cmd], check=True
    )
    try:

        def screen() -> str:
            return subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", "td"], capture_output=True, text=True
            ).stdout

        assert _wait_for(lambda: "no GPU events" in screen(), 30), screen()
        text = screen()
        assert "failed" not in text and "TypeError" not in text
        assert "indexing events" not in text
        rows = [line for line in text.splitlines() if line.startswith("│")]
        assert any("verify" in r and "draft" not in r for r in rows), text  # a name on screen
        assert "warning (w: read them)" in text  # the notes: one line
        subprocess.run([*tmux, "send-keys", "-t", "td", "e"], check=True)
        assert _wait_for(lambda: "event edges: no GPU events" in screen(), 5), screen()
        subprocess.run([*tmux, "send-keys", "-t", "td", "q"], check=True)
        assert _wait_for(done.exists, 10), screen()
        assert _wait_for(lambda: done.read_text().strip() != "", 2)
        assert done.read_text().strip() == "0"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
