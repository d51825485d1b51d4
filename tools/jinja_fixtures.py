#!/usr/bin/env python3
"""Writes the expected outputs the Jinja tests compare against, rendered by
Jinja2 under Hugging Face's settings (tools/jinja_ref.py), so that CI needs
no Jinja2:

  tests/jinja/cases.json          every case of tools/jinja_cases.py: the
                                  template, its variables and what Jinja2
                                  renders (or that it fails, and whether
                                  by raise_exception with which message)
  tests/chat_templates/expected.json
                                  for each released template in
                                  tests/chat_templates/ (sources in its
                                  README.md), what it renders for each
                                  conversation (system and user turns,
                                  multi-turn, tool calls and results,
                                  reasoning), with and without the tool
                                  definitions, enable_thinking=false and
                                  the generation prompt; for the
                                  templates of TEMPLATE_EXTRAS also
                                  content parts, template kwargs
                                  (a case's "kwargs", e.g.
                                  add_vision_id) and the conversations
                                  they refuse; the conversations and
                                  tools are stored once

gpt-oss.jinja is also rendered on harmony's own conversations (GPTOSS_RUNS:
an assistant's `thinking`, tool calls one per turn, a developer turn, the
turns it refuses) with reasoning_effort, builtin_tools, model_identity and
tools whose schemas reach every branch of its TypeScript rendering (a
case's "tool_defs", when they are not the common tools).

DeepSeek-V3.2 ships no Jinja template: tests/chat_templates/deepseek-v3.2.jinja
is our rendering of its encoding/encoding_dsv32.py. With --dsv32 PATH (the
vendor's encoding_dsv32.py, e.g. from huggingface.co/deepseek-ai/DeepSeek-V3.2
or vLLM's copy vllm/tokenizers/deepseek_v32_encoding.py) the expected texts
of that template are the script's encode_messages() output, and the script
stops if Jinja2's rendering of the template differs from it.

DeepSeek-V4 ships none either: tests/chat_templates/deepseek-v4.jinja is our
rendering of its encoding/encoding_dsv4.py, checked the same way with --dsv4
PATH (the vendor's encoding_dsv4.py, from huggingface.co/deepseek-ai/
DeepSeek-V4-Flash) on the common conversations and on V4's own (DSV4_RUNS:
tool results out of call order, latest_reminder, tasks, a prefilled
assistant turn, response_format, reasoning_effort, the `thinking` switch).

--builtin regenerates engine/text/chat_builtin.c from the template files.

  python3 tools/jinja_fixtures.py [--dsv32 PATH] [--dsv4 PATH] [--builtin]
"""
import argparse
import copy
import importlib.util
import json
import os
import re
import sys

import jinja2

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(here)
sys.path.insert(0, here)
import jinja_ref  # noqa: E402
import jinja_cases  # noqa: E402

NOW = 1700000000  # the time strftime_now() formats in every case

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city, e.g. Zürich or 東京",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "days": {"type": "integer", "minimum": 1}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web", "parameters": {
            "type": "object", "properties": {"query": {"type": "string"}, "filters": {"type": "array"}}}}},
]


def call(cid, name, args, as_string):
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}}


def tool_conversation(as_string):
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Weather in Paris and Tokyo for 2 days?"},
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "Two cities: two calls.",
         "tool_calls": [call("c1", "get_weather", {"city": "Paris", "days": 2}, as_string),
                        call("c2", "get_weather", {"city": "東京", "days": 2, "units": ["C"], "raw": True}, as_string)]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "{\"temp\": 20}"},
        {"role": "tool", "tool_call_id": "c2", "name": "get_weather", "content": "{\"temp\": 25}"},
        {"role": "assistant", "content": "Paris 20C, Tokyo 25C.", "reasoning_content": "Report both."},
        {"role": "user", "content": "Thanks! Now search for umbrellas."},
        {"role": "assistant", "content": None if as_string else "", "reasoning_content": "Search it.",
         "tool_calls": [call("c3", "search", {"query": "umbrella \"shop\"", "filters": [1, 2.5, None]}, as_string)]},
        {"role": "tool", "tool_call_id": "c3", "name": "search", "content": "3 results"},
    ]


CONVERSATIONS = [
    ("system+user", [{"role": "system", "content": "You are a helpful assistant."},
                     {"role": "user", "content": "What is 2+2?"}]),
    ("user only", [{"role": "user", "content": "Hello!"}]),
    ("multi-turn", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Tell me a joke."}]),
    ("multi-turn ending with the assistant", [{"role": "system", "content": "Be brief."},
                                              {"role": "user", "content": "Hi"},
                                              {"role": "assistant", "content": "Hello."}]),
    ("reasoning_content", [{"role": "user", "content": "Q1"},
                           {"role": "assistant", "content": "A1", "reasoning_content": "plan 1"},
                           {"role": "user", "content": "Q2"},
                           {"role": "assistant", "content": "A2", "reasoning_content": "  plan 2\n"}]),
    ("reasoning inside the content", [{"role": "user", "content": "Q"},
                                      {"role": "assistant", "content": "<think>\nplan\n</think>\n\nA"},
                                      {"role": "user", "content": "Q2 /nothink"}]),
    ("unicode and whitespace", [{"role": "system", "content": "Réponds en français.\t"},
                                {"role": "user", "content": "日本語で？ 🙂\n"},
                                {"role": "assistant", "content": " \u3000はい。\u00a0"}]),
    ("tool calls with object arguments", tool_conversation(False)),
    ("tool calls with JSON-string arguments", tool_conversation(True)),
    ("alternation broken", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]),
]

VARIANTS = [
    ("", {}),
    (", tools", {"tools": TOOLS}),
    (", enable_thinking=false", {"enable_thinking": False}),
]

# Conversations only some templates are rendered on (see TEMPLATE_EXTRAS): content given
# as a list of parts (text, images, videos), and the conversations a template refuses
# with its own message. They follow CONVERSATIONS in expected.json's list.
PARTS_CONVERSATION = [
    {"role": "system", "content": [{"type": "text", "text": "You are a helpful assistant."},
                                   {"type": "text", "text": " Be brief. "}]},
    {"role": "user", "content": [{"type": "image", "image": "file:///tmp/a.png"},
                                 {"type": "text", "text": "What is in this picture?"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
    {"role": "user", "content": [{"type": "text", "text": "And these?"},
                                 {"type": "image_url", "image_url": {"url": "https://example.com/b.png"}},
                                 {"type": "video", "video": "file:///tmp/c.mp4"},
                                 {"type": "image", "image": "file:///tmp/d.png"}]},
]

EXTRA_CONVERSATIONS = [
    ("content parts", PARTS_CONVERSATION),
    ("reasoning inside the content after the last query", [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "<think>\nplan A\n</think>\n\nA1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "\n<think>\nplan B\n\n</think>\n\nA2", "tool_calls": [
            call("c9", "search", {"query": "q", "filters": []}, False)]},
        {"role": "tool", "tool_call_id": "c9", "content": [{"type": "text", "text": "no results"}]},
        {"role": "assistant", "content": "Nothing found.", "reasoning_content": 7}]),
    ("a tool response as the last user turn", [
        {"role": "user", "content": "Q"},
        {"role": "user", "content": "<tool_response>\nr\n</tool_response>"}]),
    ("no messages", []),
    ("no user query", [{"role": "system", "content": "S"}, {"role": "assistant", "content": "A"}]),
    ("a system message not first", [{"role": "user", "content": "Q"}, {"role": "system", "content": "S"}]),
    ("an unknown role", [{"role": "developer", "content": "D"}, {"role": "user", "content": "Q"}]),
    ("an image in the system message", [
        {"role": "system", "content": [{"type": "image", "image": "file:///tmp/a.png"}]},
        {"role": "user", "content": "Q"}]),
    ("a video in the system message", [
        {"role": "system", "content": [{"type": "video", "video": "file:///tmp/c.mp4"}]},
        {"role": "user", "content": "Q"}]),
    ("a content part of unknown type", [{"role": "user", "content": [{"type": "audio", "audio": "a.wav"}]}]),
    ("content neither text nor parts", [{"role": "user", "content": {"text": "Q"}}]),
    ("no content", [{"role": "user", "content": "Q"}, {"role": "assistant", "content": None},
                    {"role": "user"}]),
]

# Conversations only deepseek-v4.jinja is rendered on: the fields of DeepSeek-V4's
# encoding script that the common conversations do not use. They follow EXTRA_CONVERSATIONS.
DSV4_CONVERSATIONS = [
    ("tool results out of call order, then text", [
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
        {"role": "assistant", "content": "", "reasoning_content": "Two calls.", "tool_calls": [
            call("c1", "get_weather", {"city": "Paris"}, False), call("c2", "get_weather", {"city": "東京"}, False)]},
        {"role": "tool", "tool_call_id": "c2", "content": "{\"temp\": 25}"},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 20}"},
        {"role": "user", "content": "And in Fahrenheit?"}]),
    ("tool results without ids, the last turn", [
        {"role": "user", "content": "Search twice."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "search", "arguments": {"query": "a"}}},
            {"type": "function", "function": {"name": "search", "arguments": {}}}]},
        {"role": "tool", "content": "first"},
        {"role": "tool", "content": [{"type": "text", "text": "second"}, {"type": "image", "image": "x.png"},
                                     {"type": "text", "text": "end"}]}]),
    ("latest_reminder", [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1", "reasoning_content": "r1"},
        {"role": "latest_reminder", "content": "Today is Friday."},
        {"role": "user", "content": "What day is it?"}]),
    ("latest_reminder after the last user turn", [
        {"role": "user", "content": "Q"}, {"role": "latest_reminder", "content": "Be brief."}]),
    ("a developer turn before the last user turn", [
        {"role": "developer", "content": "Answer in French."}, {"role": "assistant", "content": "D'accord."},
        {"role": "user", "content": "Hello"}]),
    ("a task on the last user turn", [
        {"role": "system", "content": "S"}, {"role": "user", "content": "Book a table.", "task": "action"}]),
    ("a task answered", [
        {"role": "user", "content": "Long text about flights", "task": "title"},
        {"role": "assistant", "content": "Flights", "reasoning_content": "unused"},
        {"role": "user", "content": "Thanks", "task": "query"}]),
    ("an invalid task", [{"role": "user", "content": "Q", "task": "poem"}]),
    ("a prefilled assistant turn", [
        {"role": "user", "content": "Q"}, {"role": "assistant", "content": "The answer is", "reasoning_content": "r",
                                           "wo_eos": True}]),
    ("response_format", [
        {"role": "system", "content": "Reply in JSON.", "response_format": {
            "type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}},
        {"role": "user", "content": "Q"}]),
    ("consecutive user turns after a tool result", [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "", "tool_calls": [call("c1", "search", {"query": "q"}, False)]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "user", "content": "more"}, {"role": "user", "content": "and more"},
        {"role": "assistant", "content": "Done.", "reasoning_content": "ok"}]),
]

# Conversations only gpt-oss.jinja is rendered on: harmony's fields (an assistant's
# `thinking`, one tool call per assistant turn, its content_type, a developer turn) and
# the turns the template refuses. They follow DSV4_CONVERSATIONS.
def harmony_call(name, args, as_string=False, **more):
    c = call("h_" + name, name, args, as_string)
    c["function"].update(more)
    return c


GPTOSS_CONVERSATIONS = [
    ("harmony: a developer turn", [
        {"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hello"}]),
    ("harmony: thinking on every assistant turn", [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1", "thinking": "plan 1"},
        {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2", "thinking": "  plan 2\n"}]),
    ("harmony: a tool call, its result and the answer", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "thinking": "Call get_weather.", "tool_calls": [
            harmony_call("get_weather", {"city": "Paris", "days": 2})]},
        {"role": "tool", "tool_call_id": "h_get_weather", "content": "{\"temp\": 20}"},
        {"role": "assistant", "content": "20C in Paris.", "thinking": "Report it."},
        {"role": "user", "content": "And Tokyo?"}]),
    ("harmony: a tool call awaiting the answer", [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Weather in 東京?"},
        {"role": "assistant", "content": "Looking it up.", "tool_calls": [
            harmony_call("get_weather", {"city": "東京", "units": ["C"], "raw": True})]},
        {"role": "tool", "tool_call_id": "h_get_weather", "content": "sunny, 25"},
        {"role": "assistant", "thinking": "Now search.", "tool_calls": [
            harmony_call("search", {"query": "umbrella"}, True, content_type="<|constrain|>json")]},
        {"role": "tool", "tool_call_id": "h_search", "content": "3 results"}]),
    ("harmony: the last assistant turn without thinking", [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]),
    ("harmony: channel tags in the content", [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "<|channel|>analysis<|message|>x<|end|>"}]),
    ("harmony: channel tags in the thinking", [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "A", "thinking": "<|channel|>final<|message|>x"}]),
    ("harmony: content and thinking on a tool call", [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "c", "thinking": "t", "tool_calls": [harmony_call("search", {"query": "q"})]}]),
    ("harmony: a tool result without a call", [
        {"role": "user", "content": "Q"}, {"role": "tool", "content": "r"}]),
]

# Tools whose parameters exercise every branch of the template's TypeScript rendering.
GPTOSS_TOOLS = TOOLS + [
    {"type": "function", "function": {
        "name": "plot", "description": "Plot points", "parameters": {
            "type": "object", "required": ["xs", "style"], "properties": {
                "xs": {"type": "array", "items": {"type": "number"}, "description": "x values"},
                "ns": {"type": "array", "items": {"type": "integer"}, "nullable": True},
                "flags": {"type": "array", "items": {"type": "boolean"}},
                "labels": {"type": "array", "items": {"type": "string"}},
                "grid": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
                "points": {"type": "array", "items": {"type": "object", "required": ["x"], "properties": {
                    "x": {"type": "number"}, "y": {"type": "number"}}}},
                "style": {"type": "object", "required": ["color"], "properties": {
                    "color": {"type": "string", "nullable": True}, "width": {"type": "integer"}}},
                "units": {"type": "string", "enum": ["C", "F"], "default": "C", "description": "Unit"},
                "mode": {"oneOf": [{"type": "string", "description": "by name"}, {"type": "integer", "default": 3}],
                         "default": "auto"},
                "shape": {"oneOf": [{"type": "object"}, {"type": "string"}]},
                "value": {"type": ["string", "number"]},
                "one": {"type": ["boolean"]},
                "anything": {},
                "scale": {"type": "number", "default": 1.5},
                "log": {"type": "boolean", "default": False},
                "tags": {"type": "array", "nullable": True}}}}},
    {"type": "function", "function": {"name": "now", "description": "The time",
                                      "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "ping", "description": "Ping"}},
]

GPTOSS_VARIANTS = [
    ("", {}),
    (", tools", {"tools": GPTOSS_TOOLS}),
    (", reasoning_effort=low", {"kwargs": {"reasoning_effort": "low"}}),
    (", reasoning_effort=high", {"kwargs": {"reasoning_effort": "high"}}),
    (", builtin_tools, model_identity", {"kwargs": {"builtin_tools": ["browser", "python"],
                                                    "model_identity": "You are Colibri."}}),
    (", tools, builtin_tools=python, reasoning_effort=medium", {
        "tools": TOOLS, "kwargs": {"builtin_tools": ["python"], "reasoning_effort": "medium"}}),
]
GPTOSS_RUNS = ([(n, GPTOSS_VARIANTS) for n, _ in GPTOSS_CONVERSATIONS]
               + [(n, GPTOSS_VARIANTS[2:5]) for n in ("system+user", "tool calls with object arguments",
                                                      "no messages", "an unknown role")]
               + [("system+user", [(", builtin_tools=browser", {"kwargs": {"builtin_tools": ["browser"]}})])])

# variants of the extra conversations; "kwargs" are more template variables, passed as they are
EXTRA_VARIANTS = [
    ("", {}),
    (", tools", {"tools": TOOLS}),
    (", enable_thinking=false", {"enable_thinking": False}),
    (", enable_thinking=true", {"kwargs": {"enable_thinking": True}}),
]
DSV4_VARIANTS = [
    ("", {}),
    (", tools", {"tools": TOOLS}),
    (", enable_thinking=false", {"enable_thinking": False}),
    (", thinking=false", {"kwargs": {"thinking": False}}),
]
DSV4_EFFORT = [
    (", reasoning_effort=max", {"kwargs": {"reasoning_effort": "max"}}),
    (", reasoning_effort=max, enable_thinking=false", {"enable_thinking": False, "kwargs": {"reasoning_effort": "max"}}),
    (", reasoning_effort=high", {"kwargs": {"reasoning_effort": "high"}}),
    (", reasoning_effort=low", {"kwargs": {"reasoning_effort": "low"}}),
]
DSV4_RUNS = ([(n, DSV4_VARIANTS) for n, _ in DSV4_CONVERSATIONS]
             + [(n, DSV4_VARIANTS) for n in ("reasoning inside the content after the last query", "no messages",
                                              "no user query", "a system message not first", "an unknown role",
                                              "no content")]
             + [(n, DSV4_EFFORT) for n in ("system+user", "tool calls with object arguments", "no messages")]
             + [("tool calls with object arguments", [(", tools, reasoning_effort=max", {
                 "tools": TOOLS, "kwargs": {"reasoning_effort": "max"}})])])

# template file: [(extra conversation name, the variants it is rendered with)]
TEMPLATE_EXTRAS = {
    "deepseek-v4.jinja": DSV4_RUNS,
    "gpt-oss.jinja": GPTOSS_RUNS,
    "qwen3.5.jinja": [(n, EXTRA_VARIANTS) for n, _ in EXTRA_CONVERSATIONS]
    + [("content parts", [(", add_vision_id", {"kwargs": {"add_vision_id": True}})])],
}

# template file: (bos_token, eos_token) as the model's tokenizer_config.json gives them (None: absent)
TEMPLATES = {
    "qwen3.jinja": (None, "<|im_end|>"),
    "qwen1.5-moe.jinja": (None, "<|im_end|>"),
    "deepseek-v3.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-v3.1.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-v3.2.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-v4.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "olmoe.jinja": ("<|endoftext|>", "<|endoftext|>"),
    "tulu3.jinja": ("<|begin_of_text|>", "<|end_of_text|>"),
    "mixtral.jinja": ("<s>", "</s>"),
    "mixtral-v0.1-original.jinja": ("<s>", "</s>"),
    "glm-4.5-llama.cpp.jinja": (None, "<|endoftext|>"),
    "glm-4.6.jinja": (None, "<|endoftext|>"),
    "glm-4.7.jinja": (None, "<|endoftext|>"),
    "glm-4.7-flash.jinja": (None, "<|endoftext|>"),
    "qwen3.5.jinja": (None, "<|im_end|>"),
    "gpt-oss.jinja": ("<|startoftext|>", "<|return|>"),
}


def hf_variables(messages, tools, gen, extra, bos, eos):
    """What apply_chat_template passes: special tokens, then the template kwargs."""
    v = {}
    if bos is not None:
        v["bos_token"] = bos
    if eos is not None:
        v["eos_token"] = eos
    v.update(messages=messages, tools=tools, documents=None, add_generation_prompt=gen)
    v.update(extra)
    return v


def dsv32_reference(enc, messages, tools, extra):
    """encode_messages() as vLLM's DeepseekV32Tokenizer calls it for a chat request."""
    think = extra.get("enable_thinking", True)
    msgs = copy.deepcopy(messages)
    for m in msgs:  # the script wants OpenAI's JSON-string arguments
        for tc in m.get("tool_calls") or []:
            if not isinstance(tc["function"]["arguments"], str):
                tc["function"]["arguments"] = json.dumps(tc["function"]["arguments"], ensure_ascii=False)
    drop = True
    if tools:
        msgs.insert(0, {"role": "system", "tools": tools})
        drop = False
    try:
        return ("ok", enc.encode_messages(msgs, thinking_mode="thinking" if think else "chat", drop_thinking=drop))
    except Exception as e:
        return ("error", "%s: %s" % (type(e).__name__, e), False)


# What encode_messages() appends after a last user / developer turn (or a
# task's): deepseek-v4.jinja leaves it out without add_generation_prompt.
DSV4_GEN_PROMPT = re.compile("(<｜Assistant｜>(<think>|</think>)(<｜action｜>)?"
                             "|<｜(query|authority|domain|title|read_url)｜>)$")


def dsv4_reference(enc, messages, tools, variables, gen=True):
    """encode_messages() of encoding_dsv4.py under deepseek-v4.jinja's conventions for a chat
    request: the tools in a leading system message, thinking unless `thinking` (or else
    enable_thinking) is false, reasoning_effort passed on; without gen, less the generation
    prompt the script put after the last turn (one that the assistant answers next)."""
    r = dsv4_encode(enc, messages, tools, variables)
    last = messages[-1] if messages else {}
    if r[0] == "ok" and not gen and (last.get("role") in ("user", "developer", "tool")
                                     or last.get("task") is not None):
        m = DSV4_GEN_PROMPT.search(r[1])
        if not m:
            sys.exit("encoding_dsv4.py: no generation prompt at the end of %r" % r[1][-80:])
        r = ("ok", r[1][:m.start()])
    return r


def dsv4_encode(enc, messages, tools, variables):
    think = variables.get("thinking", variables.get("enable_thinking", True))
    msgs = copy.deepcopy(messages)
    for m in msgs:  # the script wants OpenAI's JSON-string arguments
        for tc in m.get("tool_calls") or []:
            if not isinstance(tc["function"]["arguments"], str):
                tc["function"]["arguments"] = json.dumps(tc["function"]["arguments"], ensure_ascii=False)
    if tools:
        msgs.insert(0, {"role": "system", "tools": tools})
    try:
        return ("ok", enc.encode_messages(msgs, thinking_mode="thinking" if think else "chat",
                                          reasoning_effort=variables.get("reasoning_effort")))
    except Exception as e:
        return ("error", "%s: %s" % (type(e).__name__, e), False)


# conversations rendered with the tool definitions too
WITH_TOOLS = {"system+user", "user only", "tool calls with object arguments", "tool calls with JSON-string arguments"}


def render_case(name, text, bos, eos, ci, cname, messages, vname, extra, gen, enc, enc4):
    """One expected.json case: extra holds tools, enable_thinking=false (a flag of the case)
    and kwargs (more template variables, passed as they are)."""
    tools = extra.get("tools")
    kw = {k: v for k, v in extra.items() if k not in ("tools", "kwargs")}
    variables = dict(kw, **extra.get("kwargs", {}))
    ref = jinja_ref.render(text, hf_variables(messages, tools, gen, variables, bos, eos), NOW)
    string_args = any(isinstance(tc["function"]["arguments"], str)
                      for m in messages for tc in m.get("tool_calls") or [])
    if name == "deepseek-v3.2.jinja" and enc and not string_args:  # the template wants mappings
        want = dsv32_reference(enc, messages, tools, kw)
        if (want[0] == "ok") != (ref[0] == "ok") or (want[0] == "ok" and want[1] != ref[1]):
            sys.exit("deepseek-v3.2.jinja differs from encoding_dsv32.py on %s%s:\n  script: %r\n"
                     "  jinja2: %r" % (cname, vname, want, ref))
    if name == "deepseek-v4.jinja" and enc4 and not string_args:
        want = dsv4_reference(enc4, messages, tools, variables, gen)
        if (want[0] == "ok") != (ref[0] == "ok") or (want[0] == "ok" and want[1] != ref[1]):
            sys.exit("deepseek-v4.jinja differs from encoding_dsv4.py on %s%s:\n  script: %r\n"
                     "  jinja2: %r" % (cname, vname, want, ref))
        CHECKED_DSV4.append(want[0])
    case = {"name": "%s%s%s" % (cname, vname, "" if gen else ", no generation prompt"),
            "conversation": ci, "tools": tools is not None, "add_generation_prompt": gen}
    case.update(kw)
    if tools is not None and tools is not TOOLS:  # the case's own tool definitions
        case["tool_defs"] = tools
    if "kwargs" in extra:
        case["kwargs"] = extra["kwargs"]
    if ref[0] == "ok":
        case["expected"] = ref[1]
    else:
        case["error"] = ref[1]
        case["raised"] = ref[2]
    return case


CHECKED_DSV4 = []  # the outcome of each case checked against encoding_dsv4.py


def chat_fixtures(enc, enc4):
    conversations = CONVERSATIONS + EXTRA_CONVERSATIONS + DSV4_CONVERSATIONS + GPTOSS_CONVERSATIONS
    out = {"generated_by": "tools/jinja_fixtures.py, Jinja2 %s" % jinja2.__version__, "now": NOW, "tools": TOOLS,
           "conversations": [{"name": n, "messages": m} for n, m in conversations], "templates": {}}
    index = {n: i for i, (n, _) in enumerate(conversations)}
    folder = os.path.join(repo, "tests", "chat_templates")
    for name, (bos, eos) in TEMPLATES.items():
        with open(os.path.join(folder, name), encoding="utf-8", newline="") as f:
            text = f.read()
        runs = [(cname, [v for v in VARIANTS if "tools" not in v[1] or cname in WITH_TOOLS])
                for cname, _ in CONVERSATIONS]
        runs += TEMPLATE_EXTRAS.get(name, [])
        cases = []
        for cname, variants in runs:
            ci = index[cname]
            for vname, extra in variants:
                for gen in (True, False):
                    cases.append(render_case(name, text, bos, eos, ci, cname, conversations[ci][1], vname, extra,
                                             gen, enc, enc4))
        out["templates"][name] = {"bos_token": bos, "eos_token": eos, "cases": cases}
    return out


def unit_fixtures():
    cases = []
    for c in jinja_cases.CASES:
        name, template, variables = c if len(c) == 3 else (c[0], c[1], {})
        ref = jinja_ref.render(template, variables, NOW)
        case = {"name": name, "template": template, "vars": variables}
        if ref[0] == "ok":
            case["expected"] = ref[1]
        else:
            case["error"] = ref[1]
            case["raised"] = ref[2]
        cases.append(case)
    return {"generated_by": "tools/jinja_fixtures.py, Jinja2 %s" % jinja2.__version__, "now": NOW, "cases": cases}


def c_string(s):
    lines, cur = [], ""
    for ch in s:
        cur += {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t"}.get(ch, ch)
        if ch == "\n":
            lines.append('\t"%s"' % cur)
            cur = ""
    if cur:
        lines.append('\t"%s"' % cur)
    return "\n".join(lines)


# engine/text/chat_builtin.c: (C name, template file, model types it serves)
BUILTINS = [
    ("chat_builtin_deepseek_v32", "deepseek-v3.2.jinja", "DeepSeek-V3.2's encoding/encoding_dsv32.py as a template"),
    ("chat_builtin_deepseek_v4", "deepseek-v4.jinja", "DeepSeek-V4's encoding/encoding_dsv4.py as a template"),
    ("chat_builtin_glm5", "glm-4.7.jinja", "zai-org's GLM-4.7 template, whose format GLM-5 (glm_moe_dsa) keeps"),
    ("chat_builtin_qwen35", "qwen3.5.jinja", "Qwen3.5's template (qwen3_5_moe, qwen3_5_moe_text)"),
    ("chat_builtin_qwen3", "qwen3.jinja", "Qwen3's template, for Qwen3-Next (qwen3_next)"),
]


def write_builtin():
    folder = os.path.join(repo, "tests", "chat_templates")
    texts = [open(os.path.join(folder, f), encoding="utf-8", newline="").read() for _, f, _ in BUILTINS]
    assert all("??" not in t for t in texts), "a trigraph in a C string"
    width = max(len(c) for c, _, _ in BUILTINS) - len("chat_builtin_") + 1
    src = """/*
 * chat_builtin — Jinja texts of the formats whose checkpoints ship no chat
 * template, rendered by the Jinja subset when a model has none. The texts
 * are also files of tests/chat_templates/, which tests/test_chat.c checks
 * are the same bytes; edit those and regenerate this file
 * (tools/jinja_fixtures.py --builtin).
%s */
#include "engine/text/chat_internal.h"
""" % "".join(" *   %-*s %s: %s\n" % (width, c[len("chat_builtin_"):] + ":", f, why) for c, f, why in BUILTINS)
    for (c, _, _), t in zip(BUILTINS, texts):
        src += "\nconst char %s[] =\n%s;\n" % (c, c_string(t))
    with open(os.path.join(repo, "engine", "text", "chat_builtin.c"), "w", encoding="utf-8") as f:
        f.write(src)


def dump(obj, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print("wrote", os.path.relpath(path, repo))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsv32", help="DeepSeek-V3.2's encoding_dsv32.py, to check deepseek-v3.2.jinja against")
    ap.add_argument("--dsv4", help="DeepSeek-V4's encoding_dsv4.py, to check deepseek-v4.jinja against")
    ap.add_argument("--builtin", action="store_true", help="regenerate engine/text/chat_builtin.c")
    a = ap.parse_args()
    enc = enc4 = None
    if a.dsv32:
        spec = importlib.util.spec_from_file_location("encoding_dsv32", a.dsv32)
        enc = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(enc)
    if a.dsv4:
        spec = importlib.util.spec_from_file_location("encoding_dsv4", a.dsv4)
        enc4 = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(enc4)
    if a.builtin:
        write_builtin()
    dump(unit_fixtures(), os.path.join(repo, "tests", "jinja", "cases.json"))
    dump(chat_fixtures(enc, enc4), os.path.join(repo, "tests", "chat_templates", "expected.json"))
    if enc4:
        print("deepseek-v4.jinja: %d cases as encoding_dsv4.py renders them (%d rendered, %d refused by both)"
              % (len(CHECKED_DSV4), CHECKED_DSV4.count("ok"), CHECKED_DSV4.count("error")))


if __name__ == "__main__":
    main()
