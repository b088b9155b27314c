"""Pages from the Jinja2 templates shipped in the package (`templates/`), with autoescaping on: every value
a template prints is escaped unless it is marked safe, and none is. A page whose context holds a generator
(the timeline's progress) is rendered as a stream: Jinja2's `generate` yields each piece as the template
reaches it, so what the generator yields reaches the browser while the rest is still being computed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from jinja2 import Environment, PackageLoader, StrictUndefined

from chronolog.console import text


@dataclass
class Page:
    """A page to render: its template, what the template reads, the status; `stream` sends it as it renders.
    `close` releases what a streamed page reads from (its broker clients): the front calls it once the
    stream ends, however it ends (finished, failed, the browser gone before or while it was sent)."""

    template: str
    context: dict = field(default_factory=dict)
    status: int = 200
    stream: bool = False
    close: Callable[[], None] | None = None


def _json_script(value: object) -> str:
    """JSON for a <script type=application/json> element: '<', '>' and '&' escaped so no value can close
    the element (the HTML spec's rule for script data)."""
    from markupsafe import Markup
    return Markup(json.dumps(value, separators=(",", ":")).replace("<", "\\u003c").replace(">", "\\u003e")
                  .replace("&", "\\u0026"))


def environment() -> Environment:
    env = Environment(loader=PackageLoader("chronolog.console", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                      finalize=lambda v: "-" if v is None else v)  # an unknown value shows as '-'
    env.filters.update(time=text.time_text, size=text.size_text, duration=text.duration_text,
                       step=text.step_text, value=text.value_text, json_script=_json_script)
    env.globals.update(url=text.url)
    return env


class Renderer:
    def __init__(self, where: str) -> None:
        self.env = environment()
        self.where = where

    def render(self, page: Page) -> str:
        return self.env.get_template(page.template).render(where=self.where, **page.context)

    def stream(self, page: Page) -> Iterator[str]:
        return self.env.get_template(page.template).generate(where=self.where, **page.context)
