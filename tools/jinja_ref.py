"""Jinja2 rendering as Hugging Face transformers v5.15.0 does it.

The environment of transformers' utils/chat_template_utils.py
(_cached_compile_jinja_template): ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and the loopcontrols extension, a {% generation %}
tag whose body renders as it is (transformers' AssistantTracker outside
assistant-mask mode), tojson = json.dumps(ensure_ascii=False, indent=None,
separators=None, sort_keys=False), raise_exception and strftime_now; the
latter formats a pinned local time so that renders are reproducible.

render(template, variables, now) returns ("ok", text) or ("error", message,
raised) where raised says that the template called raise_exception.
Used by tools/jinja_fixtures.py to write the expected outputs the C tests
compare against; needs Jinja2 >= 3.1 (Debian: python3-jinja2).
"""
import json
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Raised(jinja2.exceptions.TemplateError):
    pass


class Generation(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: the body, rendered in place."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation"), [], [], body).set_lineno(lineno)

    def _generation(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise Raised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(now).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(template, variables, now=1700000000):
    env = make_env(now)
    try:
        return ("ok", env.from_string(template).render(**variables))
    except Raised as e:
        return ("error", str(e), True)
    except Exception as e:  # the C side only has to fail too, with its own message
        return ("error", "%s: %s" % (type(e).__name__, e), False)
