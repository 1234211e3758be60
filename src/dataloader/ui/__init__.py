"""The operator's console (docs/console.md): server-rendered pages at /ui on the same
service as the HTTP API, with Jinja2 templates, htmx and live updates by server-sent events.

An adapter beside `api/`: it reads and acts only through `App` methods (never SQL of its own), so
the console, the HTTP API, the CLI and Python see the same rules and errors. Every asset (htmx, its
SSE extension, uPlot, the CSS) is in `static/`, shipped in the wheel: nothing from a CDN."""

from dataloader.ui.console import console_app

__all__ = ["console_app"]
