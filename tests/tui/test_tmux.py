"""The real `tracediff compare` in a terminal (tmux): the TUI opens, shows the verdict, q exits."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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


class Terminal:
    """`tracediff compare` running in a tmux pane of its own server (never the user's tmux)."""

    def __init__(self, tmux: list[str], done: Path) -> None:
        self.tmux, self.done = tmux, done

    def screen(self) -> str:
        return subprocess.run(
            [*self.tmux, "capture-pane", "-p", "-t", "td"], capture_output=True, text=True
        ).stdout

    def press(self, key: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", "td", key], check=True)

    def quit(self) -> str:
        """Press q; the exit status of tracediff, as its shell wrote it."""
        self.press("q")
        assert _wait_for(self.done.exists, 10), self.screen()
        assert _wait_for(lambda: self.done.read_text().strip() != "", 2)
        return self.done.read_text().strip()


@contextmanager
def compare_in_tmux(
    tmp_path: Path, cols: int, rows: int, base: str, head: str
) -> Iterator[Terminal]:
    sock = f"tracediff-test-{uuid.uuid4().hex[:8]}"  # own server: never touches the user's tmux
    done = tmp_path / "exit_code"
    tmux = ["tmux", "-L", sock]
    # a fresh tmux server may create the pane at 80x24 and resize it a moment later: start the
    # app only once the pty has its final size, so the test does not race the resize
    cmd = (
        f'cd {ROOT} && until [ "$(stty size)" = "{rows} {cols}" ]; do sleep 0.1; done; '
        f"{TRACEDIFF} compare {base} {head}; echo $? > {done}; sleep 30"
    )
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", str(cols), "-y", str(rows), "-s", "td", cmd], check=True
    )
    try:
        yield Terminal(tmux, done)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_compare_opens_tui_in_a_terminal_and_q_exits(tmp_path: Path) -> None:
    with compare_in_tmux(tmp_path, 120, 40, "samples/g_good.arrow", "samples/g_bad.arrow") as t:
        # the whole first frame is out once the timeline (the last widget) is drawn
        assert _wait_for(lambda: "GPU 0 base" in t.screen(), 30), t.screen()
        text = t.screen()
        assert "base 5.570 ms → head 3.622 ms per cycle" in text
        assert "change -1.947 ms (-35.0 %)" in text
        assert "attribution · 34/34" in text and "timeline · cycle 0" in text
        t.press("Right")
        assert _wait_for(lambda: "timeline · cycle 1" in t.screen(), 5), t.screen()
        assert t.quit() == "0"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_host_only_capture_in_an_80x24_terminal(tmp_path: Path) -> None:
    """`tracediff compare` on two GPU-less captures, in a real 80x24 terminal: no error, the
    phases' names on screen, the timeline says why it is empty; `e` says why it does nothing."""
    d = "tests/data/capture-hostonly"
    with compare_in_tmux(
        tmp_path, 80, 24, f"{d}/base/report.sqlite", f"{d}/slow/report.sqlite"
    ) as t:
        assert _wait_for(lambda: "no GPU events" in t.screen(), 30), t.screen()
        text = t.screen()
        assert "failed" not in text and "TypeError" not in text
        assert "indexing events" not in text
        rows = [line for line in text.splitlines() if line.startswith("│")]
        assert any("verify" in r and "draft" not in r for r in rows), text  # a name on screen
        assert "warning (w: read them)" in text  # the notes: one line
        t.press("e")
        assert _wait_for(lambda: "event edges: no GPU events" in t.screen(), 5), t.screen()
        assert t.quit() == "0"
