"""The Deep tab (``--deep``): Holistic Trace Analysis's critical path beside the verdict, launch
statistics and queue lengths — the same lines as the report's deep section, shown as they arrive."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from trainscope.reports.deep import deep_text_lines
from trainscope.traces.safe_text import safe_strings


class DeepPane(VerticalScroll):
    DEFAULT_CSS = """
    DeepPane { padding: 0 1; }
    DeepPane #deep-status { height: auto; color: $warning; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.result: dict[str, Any] | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="deep-status", markup=False)
        yield Static("", id="deep-body", markup=False)

    def running(self, stage: str) -> None:
        self.query_one("#deep-status", Static).update(
            f"running: {stage}… (the rest of the app is ready; HTA runs in the "
            "background and can take a minute on large traces)"
        )

    def show(self, result: dict[str, Any]) -> None:
        self.result = result
        result = safe_strings(result)  # HTA's kernel names and messages, as every view shows them
        self.query_one("#deep-status", Static).update("")
        if result.get("unavailable"):
            self.query_one("#deep-body", Static).update(Text(f"Deep analysis unavailable: {result['reason']}"))
            return
        self.query_one("#deep-body", Static).update(Text("\n".join(deep_text_lines(result, lambda x: x))))
