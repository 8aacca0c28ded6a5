"""Modal screens: help, error, warnings list and the loading screen.

Stage: presentation. Each is small and self-contained; errors from workers land in `ErrorModal`.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Static

from tracediff.engine.result import Comparison
from tracediff.report.text import safe
from tracediff.suspects import Suspects
from tracediff.tui.notes import shorten_paths
from tracediff.tui.stackview import stack_text


class _Dialog(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,enter", "dismiss_dialog", "Close")]

    def __init__(self, title: str, body: Text | str, *, classes: str = "") -> None:
        super().__init__(classes=classes)
        self.title_text, self.body = title, body

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as v:
            v.border_title = self.title_text
            with VerticalScroll():
                yield Static(self.body, classes="dialog-body")
        yield Footer()

    def action_dismiss_dialog(self) -> None:
        self.dismiss(None)


class ErrorModal(_Dialog):
    """Something failed: say what, keep the app alive."""

    def __init__(self, title: str, message: str) -> None:
        super().__init__(title, Text(message), classes="error")


TIMELINE_HELP = (
    "Timeline: the selected cycle, base above head, one lane per GPU (per stream where a GPU has",
    "several), time from the cycle's GPU start. 'a' draws head through the ops both runs share,",
    "so matched ops line up and stretched idle time stands out. Cross-stream CUDA event edges",
    "(cudaEventRecord → cudaStreamWaitEvent, 'e' hides them): a capital letter on the recording",
    "lane where the recorded work ended, the same letter in lower case on the waiting lane where",
    "the waiting stream went on; bright if it started within 20 µs (it waited on the event), dim",
    "if other work held it longer. Letters count the edges of the window in order of the wait.",
)
STRIP_HELP = (
    "Replay strip: each cycle's GPU span (critical GPU), base and head on one scale; the",
    "selected cycle is shown reversed.",
)
CHANGE_HELP = (
    "change ms: head - base per cycle; * = 95% CI excludes 0 and the change is at least 1 µs",
    "and 1% of the base time.",
)
RUNS_HELP = (
    "Run sets (several runs a side): the verdict's 'runs' line is each run's mean cycle time,",
    "both sides on one scale; the table's runs column: ✓ = moved the same way in every run,",
    "k/N = the head runs it occurs in (base's, for an op head lacks).",
)


class HelpScreen(_Dialog):
    """Every key of the main screen with what it does, and how to read the timeline."""

    def __init__(self, bindings: list[tuple[str, str]], legend: Text) -> None:
        body = Text()
        for key, desc in bindings:
            body.append(f"{key:>14}  ", "bold")
            body.append(f"{desc}\n")
        # paragraphs without line breaks of their own: the dialog wraps them to its width
        # (hard breaks at 84 columns read as ragged half lines at 80x24)
        body.append("\n" + " ".join(TIMELINE_HELP) + "\n")
        body.append_text(legend)
        body.append("\n\n" + " ".join(STRIP_HELP) + "\n" + " ".join(CHANGE_HELP) + "\n")
        body.append(" ".join(RUNS_HELP))
        super().__init__("tracediff keys", body)


class NotesScreen(_Dialog):
    """All environment differences and warnings (paths relative to the working directory)."""

    def __init__(self, c: Comparison) -> None:
        body = Text()
        if c.env_diffs:
            body.append("Environment differs (check before trusting the diff):\n", "bold")
            for d in c.env_diffs:
                body.append(safe(shorten_paths(f"  {d.key}: {d.base!r} → {d.head!r}")) + "\n")
        for w in c.warnings:
            body.append(f"⚠ {safe(shorten_paths(str(w)))}\n", "#ffaf00")
        if not body.plain:
            body.append("No environment differences and no warnings.")
        super().__init__("environment and warnings", body)


class StackScreen(_Dialog):
    """The selected contributor's launch stacks and the suspect commits (tui/stackview.py)."""

    def __init__(self, c: Comparison, cid: str, suspects: Suspects | None) -> None:
        super().__init__("launch stacks and suspect commits", stack_text(c, cid, suspects))


class LoadingScreen(Screen[None]):
    """Shown while a loader callable reads and compares the runs."""

    def compose(self) -> ComposeResult:
        yield Static("loading…", id="progress")
        yield Footer()

    def say(self, msg: str) -> None:
        self.query_one("#progress", Static).update(f"tracediff: {msg}…")
