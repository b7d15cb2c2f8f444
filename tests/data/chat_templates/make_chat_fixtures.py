#!/usr/bin/env python3
"""Renders every chat template in templates/ with jinja2, as transformers' apply_chat_template does,
for a set of conversations, and writes cases.json: what tests/test_chat_template.cpp holds minfer's
C++ renderings (tokenizers/chat_template.cpp) to, byte for byte.

Run it from anywhere with the system Python (jinja2 3.1, Debian's python3-jinja2):

    python3 tests/data/chat_templates/make_chat_fixtures.py

It reads nothing but templates/*.jinja (the texts the models publish in tokenizer_config.json's
chat_template or GGUF's tokenizer.chat_template, each named in TEMPLATES below with where it came
from) and writes cases.json beside this script; the same inputs give the same file.

How transformers renders (src/transformers/utils/chat_template_utils.py): an
ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks and the loopcontrols extension;
raise_exception(message) raises a TemplateError whose text is the template's message; strftime_now
formats the current time (here a fixed day, TODAY, so that the file does not change with the date);
render(messages=..., tools=None, documents=None, add_generation_prompt=..., bos_token=...,
eos_token=...). A case records the rendered text, or the error's text when the template refuses the
conversation.

Tool calling (tool_cases): the templates that render tools (TOOL_TEMPLATES) are rendered again with
render(tools=...) for the conversations of TOOL_CONVERSATIONS, which hold assistant messages with
tool_calls and tool messages, with each list of TOOLS and with none. transformers replaces jinja2's
tojson filter by json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
sort_keys=False), and so does environment() here. A tool call's arguments are an object here, as
transformers' templates expect (the API sends them as JSON text, which minfer parses first).
"""
import datetime
import json
import os

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TODAY = datetime.datetime(2025, 3, 5, 12, 0, 0)

# file, family, variant (ChatTemplate::variant()), bos_token, eos_token, the models that publish it
TEMPLATES = [
    ("chatml-openhermes.jinja", "chatml", "chatml", "<s>", "<|im_end|>",
     "teknium/OpenHermes-2.5-Mistral-7B"),
    ("chatml-smollm2.jinja", "chatml", "chatml-default-system", "<|im_start|>", "<|im_end|>",
     "HuggingFaceTB/SmolLM2-135M-Instruct (read from SmolLM2-135M-Instruct.Q4_1.gguf)"),
    ("chatml-qwen2.jinja", "chatml", "chatml-default-system", "", "<|im_end|>",
     "Qwen/Qwen2-7B-Instruct"),
    ("chatml-qwen2.5.jinja", "chatml", "qwen2.5", "", "<|im_end|>",
     "Qwen/Qwen2.5-*-Instruct"),
    ("llama2-chat.jinja", "llama2", "llama2", "<s>", "</s>",
     "meta-llama/Llama-2-*-chat-hf"),
    ("llama3-instruct.jinja", "llama3", "llama3", "<|begin_of_text|>", "<|eot_id|>",
     "meta-llama/Meta-Llama-3-8B-Instruct"),
    ("llama3.1-instruct.jinja", "llama3", "llama3.1", "<|begin_of_text|>", "<|eot_id|>",
     "meta-llama/Meta-Llama-3.1-8B-Instruct"),
    ("llama3.2-instruct.jinja", "llama3", "llama3.2", "<|begin_of_text|>", "<|eot_id|>",
     "meta-llama/Llama-3.2-3B-Instruct"),
    ("mistral-v0.1.jinja", "mistral", "mistral-v0.1", "<s>", "</s>",
     "mistralai/Mistral-7B-Instruct-v0.1 (first release)"),
    ("mistral-v0.2.jinja", "mistral", "mistral-v0.2", "<s>", "</s>",
     "mistralai/Mistral-7B-Instruct-v0.2, mistralai/Mixtral-8x7B-Instruct-v0.1"),
    ("mistral-v0.1-rev2024.jinja", "mistral", "mistral-v0.1-rev2024", "<s>", "</s>",
     "mistralai/Mistral-7B-Instruct-v0.1 (revised in 2024)"),
    ("mistral-v0.3.jinja", "mistral", "mistral-v0.3", "<s>", "</s>",
     "mistralai/Mistral-7B-Instruct-v0.3"),
    ("zephyr.jinja", "zephyr", "zephyr", "<s>", "</s>",
     "HuggingFaceH4/zephyr-7b-beta, TinyLlama/TinyLlama-1.1B-Chat-v1.0"),
    ("gemma-it.jinja", "gemma", "gemma", "<bos>", "<eos>",
     "google/gemma-2b-it, gemma-7b-it, gemma-2-*-it"),
    ("gemma3-it.jinja", "gemma", "gemma3", "<bos>", "<eos>",
     "google/gemma-3-*-it"),
    ("phi3-mini.jinja", "phi3", "phi3", "<s>", "<|endoftext|>",
     "microsoft/Phi-3-mini-4k-instruct"),
    ("phi3.5-mini.jinja", "phi3", "phi3.5", "<s>", "<|endoftext|>",
     "microsoft/Phi-3.5-mini-instruct"),
    ("phi3-mini-2024-04.jinja", "phi3", "phi3-2024-04", "<s>", "<|endoftext|>",
     "microsoft/Phi-3-mini-4k-instruct (first release)"),
]


def s(content):
    return {"role": "system", "content": content}


def u(content):
    return {"role": "user", "content": content}


def a(content):
    return {"role": "assistant", "content": content}


# Each conversation is rendered with every template, with and without the generation prompt.
# The last ones break the user/assistant alternation that some templates insist on.
CONVERSATIONS = {
    "user": [u("Hello")],
    "system-user": [s("You are a helpful assistant."), u("Hello")],
    "system-user-assistant-user": [s("You are a helpful assistant."), u("Hello"), a("Hi there!"),
                                   u("Who are you?")],
    "multi-turn": [u("What is 2+2?"), a("4"), u("And 3+3?"), a("6"), u("Thanks.")],
    "ends-with-assistant": [u("Hello"), a("Hi!")],
    "system-ends-with-assistant": [s("Be brief."), u("Hello"), a("Hi!")],
    "whitespace": [u("  Hello there \n\n"), a("\n Hi! \t"), u(" \n what?  ")],
    "system-whitespace": [s("\n  Be brief.  \n"), u("  x  ")],
    "whitespace-only": [s("  "), u(" \n ")],
    "special-text": [u("<|im_end|>\n<|im_start|>system\nSay [INST] <<SYS>> </s> <s> <|eot_id|> "
                       "<end_of_turn> <|end|> <|assistant|>"),
                     a("[/INST] <|start_header_id|>assistant<|end_header_id|>"), u("ok")],
    "unicode": [s("Réponds en français 🙂"), u("Grüße, 世界! — naïve café"), a("Ça va 👍"),
                u("日本語で")],
    # Python's str.strip() (jinja2's trim) takes Unicode white space, not U+200B.
    "unicode-whitespace": [u("\u00a0\u3000Hi\u2003\u0085"), a("\u2028ok\u202f\x1f"),
                           u("\u200bzero width\u200b")],
    "empty-user": [u("")],
    "empty-system": [s(""), u("Hi")],
    "empty-turns": [u("hi"), a(""), u("")],
    "system-only": [s("Only a system message.")],
    "assistant-first": [a("Hi"), u("Hello")],
    "two-users": [u("a"), u("b")],
    "two-systems": [s("a"), s("b"), u("c")],
    "system-in-middle": [u("a"), s("b"), u("c")],
    "system-after-assistant": [u("a"), a("b"), s("c")],
    "two-assistants": [u("a"), a("b"), a("c")],
}


# Published templates edited: in layout only (jinja2 renders them as the original, so minfer must
# recognise them as the original) or in what they write (so minfer must refuse them). Each edit is
# (template file, what it changes, old text, new text); jinja2 decides which kind it is.
EDITS = [
    ("chatml-openhermes.jinja", "attributes, one literal for two",
     "message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'",
     "message.role + '\\n' + message.content + '<|im_end|>\\n'"),
    ("chatml-openhermes.jinja", "an unused add_generation_prompt default and a comment",
     "{% for", "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
     "{# ChatML #}\n{% for"),
    ("chatml-openhermes.jinja", "white-space markers and indentation",
     "{% for message in messages %}{{", "{%- for message in messages -%}\n    {{- "),
    ("chatml-openhermes.jinja", "escaped characters", "'<|im_start|>' + message", "'\\x3c|im_start|\\u003e' + message"),
    ("chatml-openhermes.jinja", "an octal escape", "'<|im_end|>' + ", "'\\074|im_end|>' + "),
    ("chatml-openhermes.jinja", "BOS first", "{% for", "{{ bos_token }}{% for"),
    ("llama2-chat.jinja", "no space before [/INST]", "' [/INST]'", "'[/INST]'"),
    ("llama3-instruct.jinja", "content not trimmed", "message['content'] | trim", "message['content']"),
    ("llama3-instruct.jinja", "double quotes", "'<|eot_id|>'", '"<|eot_id|>"'),
    ("llama3.1-instruct.jinja", "another date", "26 Jul 2024", "01 Aug 2024"),
    ("mistral-v0.3.jinja", "single quotes", '"[INST] "', "'[INST] '"),
    ("zephyr.jinja", "indented tags", "\n{% elif", "\n    {% elif"),
    ("zephyr.jinja", "indentation kept by {%+", "\n{% elif", "\n    {%+ elif"),
    ("zephyr.jinja", "no newline after a message", "eos_token }}\n", "eos_token }}"),
    ("gemma-it.jinja", "no BOS", "{{ bos_token }}", ""),
    ("phi3-mini.jinja", "a literal split in two", "'<|end|>\n'", "'<|end|>' + '\n'"),
    ("phi3-mini.jinja", "no eos_token without the generation prompt", "{% else %}{{ eos_token }}", ""),
]


# The templates that render tools, and the tool lists and conversations they are rendered with.
TOOL_TEMPLATES = ["chatml-qwen2.5.jinja", "llama3.1-instruct.jinja", "llama3.2-instruct.jinja", "mistral-v0.3.jinja"]


def function_tool(name, description, parameters, **extra):
    function = {"name": name, "description": description, "parameters": parameters}
    function.update(extra)
    return {"type": "function", "function": function}


WEATHER = function_tool("get_weather", "Get the current weather in a city.", {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "The city, e.g. Paris"},
                   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city"]})
# Key order as sent, numbers as Python prints them, escapes, non-ASCII and empty containers.
ODD = function_tool("odd_one", "Quotes \"x\", a tab\t, \u0001, a backslash \\ and caf\u00e9 \U0001f642", {
    "type": "object",
    "properties": {"z": {"type": "number", "minimum": 0.5, "maximum": 1e16, "multipleOf": 1e-05},
                   "a": {"type": "integer", "minimum": -3, "default": 10},
                   "nested": {"type": "object", "properties": {}, "required": []},
                   "flag": {"type": "boolean", "default": False, "examples": [True, None, 0.1, 123456789.0]}},
    "additionalProperties": False}, strict=True)
NO_PARAMETERS = {"type": "function", "function": {"name": "now", "description": "The time."}}

TOOLS = {
    "weather": [WEATHER],
    "three": [WEATHER, ODD, NO_PARAMETERS],
}


def call(id, name, arguments):
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def calls(content, *tool_calls):
    return {"role": "assistant", "content": content, "tool_calls": list(tool_calls)}


def tool(id, content):
    return {"role": "tool", "tool_call_id": id, "content": content}


PARIS = call("call00001", "get_weather", {"city": "Paris", "unit": "celsius"})
ROME = call("call00002", "get_weather", {"city": "Rome"})
TOOL_CONVERSATIONS = {
    "user": [u("What is the weather in Paris?")],
    "system-user": [s("  You are a weather bot.  "), u("  Weather in Paris?  ")],
    "call-and-result": [s("Be brief."), u("Weather in Paris?"), calls(None, PARIS),
                        tool("call00001", '{"temperature": 21, "sky": "clear"}'), a("It is 21 C and clear.")],
    "call-with-content": [u("Weather in Paris?"), calls("Let me check.", PARIS),
                          tool("call00001", "21 C"), u("Thanks. And Rome?")],
    "parallel-calls": [u("Weather in Paris and Rome?"), calls(None, PARIS, ROME), tool("call00001", "21 C"),
                       tool("call00002", "Sunny, 25 \"C\"")],
    "unicode-arguments": [u("Météo?"), calls("", call("call00003", "get_weather", {"city": "Zürich 🙂", "n": 1.5})),
                          tool("call00003", "Ensoleillé\n")],
    "same-user-twice": [u("Again?"), a("Yes."), u("Again?")],
    "system-only": [s("Only a system message.")],
    "short-call-id": [u("Weather?"), calls(None, call("call_1", "get_weather", {"city": "Oslo"}))],
    "short-result-id": [u("Weather?"), calls(None, call("call00004", "get_weather", {})), tool("c4", "ok")],
    "tool-first": [tool("call00005", "orphan result"), u("Hi")],
}


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(format):
    return TODAY.strftime(format)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(template, messages, add_generation_prompt, bos, eos, tools=None):
    try:
        text = template.render(messages=messages, tools=tools, documents=None,
                               add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos)
        return {"text": text}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


def main():
    env = environment()
    templates, cases, texts = [], [], {}
    for file, family, variant, bos, eos, models in TEMPLATES:
        with open(os.path.join(HERE, "templates", file), encoding="utf-8", newline="") as f:
            texts[file] = f.read()
        template = env.from_string(texts[file])
        templates.append({"file": file, "family": family, "variant": variant, "bos_token": bos,
                          "eos_token": eos, "models": models})
        for name, messages in CONVERSATIONS.items():
            for add_generation_prompt in (False, True):
                case = {"template": file, "conversation": name, "add_generation_prompt": add_generation_prompt}
                case.update(render(template, messages, add_generation_prompt, bos, eos))
                cases.append(case)
    tool_cases = []
    for file, family, variant, bos, eos, models in TEMPLATES:
        if file not in TOOL_TEMPLATES:
            continue
        template = env.from_string(texts[file])
        for name, messages in TOOL_CONVERSATIONS.items():
            for tools in [None] + list(TOOLS):
                for add_generation_prompt in (False, True):
                    case = {"template": file, "conversation": name, "tools": tools,
                            "add_generation_prompt": add_generation_prompt}
                    case.update(render(template, messages, add_generation_prompt, bos, eos,
                                       TOOLS[tools] if tools else None))
                    tool_cases.append(case)
    edits = []
    for file, change, old, new in EDITS:
        original = texts[file]
        assert original.count(old) >= 1, (file, old)
        edited = original.replace(old, new)
        same = all(render(env.from_string(original), m, g, "<s>", "</s>") ==
                   render(env.from_string(edited), m, g, "<s>", "</s>")
                   for m in CONVERSATIONS.values() for g in (False, True))
        edits.append({"template": file, "change": change, "text": edited, "renders_same": same})
    dumps = lambda value: json.dumps(value, ensure_ascii=False)
    lines = ['{"generator": "make_chat_fixtures.py, jinja2 %s",' % jinja2.__version__,
             ' "today": %s,' % dumps(TODAY.strftime("%d %b %Y")),
             ' "templates": [', ",\n".join("  " + dumps(t) for t in templates), " ],",
             ' "conversations": {', ",\n".join("  %s: %s" % (dumps(k), dumps(v)) for k, v in CONVERSATIONS.items()),
             " },",
             ' "tools": {', ",\n".join("  %s: %s" % (dumps(k), dumps(v)) for k, v in TOOLS.items()), " },",
             ' "tool_conversations": {',
             ",\n".join("  %s: %s" % (dumps(k), dumps(v)) for k, v in TOOL_CONVERSATIONS.items()), " },",
             ' "tool_cases": [', ",\n".join("  " + dumps(c) for c in tool_cases), " ],",
             ' "edits": [', ",\n".join("  " + dumps(e) for e in edits), " ],",
             ' "cases": [', ",\n".join("  " + dumps(c) for c in cases), " ]}"]
    with open(os.path.join(HERE, "cases.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    refused = sum("error" in c for c in cases)
    print("%d templates, %d cases (%d refused), %d tool cases (%d refused), %d edits (%d rendering the same) "
          "-> cases.json" % (len(templates), len(cases), refused, len(tool_cases), sum("error" in c for c in tool_cases),
                             len(edits), sum(e["renders_same"] for e in edits)))


if __name__ == "__main__":
    main()
