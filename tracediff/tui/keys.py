"""The main screen's keys: what each does (the footer and the help screen list them).

Stage: presentation. Each binding's action is a `MainScreen.action_*`; where one cannot act for
the runs at hand, the screen says why (`reasons.py`).
"""

from __future__ import annotations

from textual.binding import Binding, BindingType

KEYS: list[BindingType] = [
    Binding("question_mark", "app.help", "Help", key_display="?", tooltip="this list"),
    Binding("q", "app.quit", "Quit"),
    Binding("left", "step(-1)", "Prev cycle", key_display="←"),
    Binding("right", "step(1)", "Next cycle", key_display="→"),
    Binding("space", "play", "Play/pause", tooltip="step through the cycles"),
    Binding("slash", "search", "Search", key_display="/", tooltip="filter by name substring"),
    Binding("s", "sort", "Sort", tooltip="|change|, change ↓, change ↑, head ms, base ms, name"),
    Binding("k", "filter_kind", "Kind", tooltip="cycle the kind filter: all, then each kind"),
    Binding(
        "g",
        "filter_gpu",
        "GPU",
        tooltip="cycle the GPU filter: all, Σ summed over GPUs (multi-GPU), then each GPU",
    ),
    Binding(
        "p",
        "per_gpu",
        "Per GPU",
        tooltip="the selected contributor on each GPU, with its sum over GPUs (multi-GPU)",
    ),
    Binding(
        "m",
        "worst_cycle",
        "Worst cycle",
        tooltip="jump to the cycle where the selected contributor is furthest from base mean",
    ),
    Binding("plus,equals_sign", "zoom(0.5)", "Zoom in", key_display="+"),
    Binding("minus", "zoom(2)", "Zoom out", key_display="-"),
    Binding("left_square_bracket", "pan(-0.25)", "Pan left", key_display="["),
    Binding("right_square_bracket", "pan(0.25)", "Pan right", key_display="]"),
    Binding("0", "fit", "Fit cycle", tooltip="show the whole cycle"),
    Binding("a", "align", "Align head", tooltip="draw head so ops matched to base line up"),
    Binding(
        "e",
        "toggle_edges",
        "Event edges",
        tooltip="show/hide cross-stream CUDA event edges on the timeline (runs that have them)",
    ),
    Binding("w", "notes", "Warnings", tooltip="environment differences and warnings"),
    Binding(
        "x",
        "whatif",
        "What if",
        tooltip="replay head with the selected contributor taken from base: predicted cycle time",
    ),
    Binding(
        "c",
        "code",
        "Code",
        tooltip="the selected contributor's launch stacks and suspect commits (compare --repo)",
    ),
    Binding("escape", "clear_search", "Clear search", show=False),
    # where p / e cannot act (check_action), they are left out of the footer and these
    # take the key instead: the action runs and says why it cannot act
    Binding("p", "why('per_gpu')", "Per GPU", show=False),
    Binding("e", "why('toggle_edges')", "Event edges", show=False),
]
