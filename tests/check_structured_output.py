#!/usr/bin/env python3
"""Structured output against `minfer serve`, through the official `openai` Python package, every
answer checked by the `jsonschema` package:
  - `client.chat.completions.parse(..., response_format=<a pydantic model>)` returns the parsed
    object;
  - a JSON Schema suite (SCHEMAS: nested objects, arrays with minItems/maxItems, enum, const,
    bounded integers and numbers, strings with pattern and length, optional properties under
    strict, anyOf, $ref/$defs, type unions), each asked at temperature 0 and at 0.8 with a fixed
    seed. An answer that stops must validate; one that says finish_reason "length" must have used
    all of max_tokens, and is counted and reported, not validated;
  - `json_object` answers a JSON object;
  - minfer's `grammar` (EBNF) and `regex` fields hold the whole answer; a schema's answer cut at
    max_tokens says finish_reason "length";
  - schemas that cannot be enforced, and a malformed grammar, are refused with a 400 naming the
    reason;
  - tool calls with tool_choice "required" and a named function, whole and streamed (the streamed
    deltas reassembled as the client does), their arguments validated against the tool's parameters.

The model is Qwen2.5-Coder-0.5B-Instruct (the Q4_K_M file `make models` fetches, under
$MINFER_MODEL_CACHE or ~/.cache/minfer/models) when present; without it the suite runs on the chat
fixture tests/data/models/smollm-chat (random weights: its answers show the grammar's hold, not
sense) and the tool calls, which need Qwen2.5's template, are skipped, saying so; so too with
--fixture, which the sanitizer build's ctest entry passes (the real model runs for minutes there).
A server built without XGrammar refuses response_format; the test is then skipped (exit 77).

The script runs itself again inside the virtualenv of tests/openai_client_support.py.

  check_structured_output.py MINFER SOURCE_DIR [--fixture]
"""
import concurrent.futures
import json
import os
import re
import sys
import time

from openai_client_support import SKIP, start_server, venv_python

IN_VENV = "MINFER_STRUCTURED_OUTPUT_IN_VENV"
if __name__ == "__main__" and os.environ.get(IN_VENV) != "1":  # again, inside the virtualenv
    python = venv_python()
    os.environ[IN_VENV] = "1"
    os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:]])

import jsonschema  # noqa: E402 (from the virtualenv)
import openai  # noqa: E402
import pydantic  # noqa: E402

QWEN_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SEED = 7
CONCURRENT = 4  # requests in flight at once (the server's --slots)


def obj(properties, required=None):
    """An object schema with no other properties; every property is required unless told."""
    return {"type": "object", "properties": properties,
            "required": list(properties) if required is None else required, "additionalProperties": False}


# (name, what the user asks, schema, max_tokens): max_tokens leaves room for a short answer, laid out
# as the model lays out JSON, so that "length" means a runaway, which the bounds are there to stop.
SCHEMAS = [
    ("person", "Describe a fictional person: their name and age.",
     obj({"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0, "maximum": 120}}), 48),
    ("nested_user", "Make up a user account: an id, an email address at example.com, and whether it is active.",
     obj({"user": obj({"id": {"type": "integer", "minimum": 1, "maximum": 99999},
                       "email": {"type": "string", "pattern": "^[a-z]{1,12}@example\\.com$"}}),
          "active": {"type": "boolean"}}), 64),
    ("colors", "List two or three colors.",
     obj({"colors": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 2, "maxItems": 3}}),
     48),
    ("weekday", "Which day of the week comes after Tuesday?",
     obj({"day": {"enum": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]}}), 24),
    ("const_point", "Give a 2D point with small coordinates.",
     obj({"kind": {"const": "point"}, "version": {"const": 2}, "x": {"type": "integer", "minimum": -9, "maximum": 9},
          "y": {"type": "integer", "minimum": -9, "maximum": 9}}), 48),
    ("bounded_integers", "Rate a movie from -5 to 5 and say how many stars out of 9 it gets.",
     obj({"score": {"type": "integer", "minimum": -5, "maximum": 5},
          "stars": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}}), 32),
    ("bounded_number", "Give a plausible outdoor temperature in Celsius and a humidity fraction.",
     obj({"celsius": {"type": "number", "minimum": -50, "maximum": 60},
          "humidity": {"type": "number", "minimum": 0, "maximum": 1}}), 48),
    ("pattern_and_length", "Invent a product code like ABC-123 and a short product word.",
     obj({"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
          "word": {"type": "string", "minLength": 3, "maxLength": 8}}), 40),
    ("optional_strict", "Describe a book: its title, and if you like its year and author.",
     obj({"title": {"type": "string", "maxLength": 30}, "year": {"type": "integer", "minimum": 1000, "maximum": 2100},
          "author": {"type": "string", "maxLength": 24}}, required=["title"]), 64),
    ("any_of", "Give an identifier, either a number or a short name.",
     obj({"id": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 1000},
                           {"type": "string", "pattern": "^[a-z]{2,8}$"}]}}), 32),
    ("refs", "Describe a line segment by its start and end points.",
     {"$defs": {"point": obj({"x": {"type": "integer", "minimum": 0, "maximum": 99},
                              "y": {"type": "integer", "minimum": 0, "maximum": 99}})},
      **obj({"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"}})}, 64),
    ("array_of_objects", "List one to three grocery items with quantities.",
     obj({"items": {"type": "array", "minItems": 1, "maxItems": 3,
                    "items": obj({"name": {"type": "string", "maxLength": 16},
                                  "qty": {"type": "integer", "minimum": 1, "maximum": 99}})}}), 96),
    ("type_union", "Is the door open? Add a note, or null if there is none.",
     obj({"open": {"type": "boolean"}, "note": {"type": ["string", "null"], "maxLength": 20}}), 40),
    ("matrix", "Give a 2 by 2 matrix of digits.",
     obj({"rows": {"type": "array", "minItems": 2, "maxItems": 2,
                   "items": {"type": "array", "minItems": 2, "maxItems": 2,
                             "items": {"type": "integer", "minimum": 0, "maximum": 9}}}}), 48),
    ("empty_array_allowed", "List the moons of Venus (there are none).",
     obj({"moons": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 2}}), 40),
]

# Schemas the server must refuse with a 400 (not answer unconstrained), and a word the reason names.
UNENFORCEABLE = [
    ("an unknown type", {"type": "strng"}, "strng"),
    ("minLength above maxLength", {"type": "string", "minLength": 5, "maxLength": 2}, "minLength"),
    ("a $ref to nothing", obj({"a": {"$ref": "#/$defs/missing"}}), "missing"),
    ("uniqueItems, which XGrammar does not enforce",
     obj({"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}), "uniqueItems"),
]

SYSTEM = "You answer with JSON only."


def cached_model(file):
    folder = os.environ.get("MINFER_MODEL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "minfer", "models")
    return os.path.join(folder, file)


def fail(what, detail=None):
    sys.exit(f"FAIL: {what}" + (f"\n{json.dumps(detail, indent=2, default=str)}" if detail is not None else ""))


def json_schema_format(name, schema):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def ask_schema(client, model, name, prompt, schema, max_tokens, temperature):
    """One answer under `schema`: ("ok" | "length", the answer's text)."""
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
        response_format=json_schema_format(name, schema), max_tokens=max_tokens, temperature=temperature, seed=SEED)
    choice, used = answer.choices[0], answer.usage.completion_tokens
    detail = {"schema": name, "temperature": temperature, "content": choice.message.content,
              "finish_reason": choice.finish_reason, "completion_tokens": used, "max_tokens": max_tokens}
    if choice.finish_reason == "length":
        if used != max_tokens:
            fail("finish_reason length before max_tokens", detail)
        return "length", choice.message.content
    if choice.finish_reason != "stop":
        fail("a constrained answer ends with stop or length", detail)
    try:
        jsonschema.validate(json.loads(choice.message.content), schema,
                            cls=jsonschema.Draft202012Validator)
    except (json.JSONDecodeError, jsonschema.ValidationError) as e:
        detail["error"] = str(e).splitlines()[0]
        fail("an answer that stopped does not validate against its schema", detail)
    return "ok", choice.message.content


def check_schema_suite(client, model, real_model):
    """Every schema at temperature 0 and 0.8; prints a line per answer and the counts."""
    jobs = [(s, t) for s in SCHEMAS for t in (0.0, 0.8)]
    started = time.time()
    with concurrent.futures.ThreadPoolExecutor(CONCURRENT) as pool:
        results = list(pool.map(lambda job: ask_schema(client, model, *job[0], job[1]), jobs))
    for ((name, *_), temperature), (status, content) in zip(jobs, results):
        print(f"  {name:20} t={temperature:.1f} {status:6} {json.dumps(content)}")
    valid = sum(status == "ok" for status, _ in results)
    truncated = [f"{s[0]} t={t}" for (s, t), (status, _) in zip(jobs, results) if status == "length"]
    print(f"schema suite: {valid} of {len(jobs)} answers validate, {len(truncated)} hit max_tokens "
          f"({', '.join(truncated) or 'none'}), in {time.time() - started:.1f} s")
    # A real model writes short answers to these prompts: a quarter cut short would mean the
    # grammar lets it ramble (unbounded whitespace, unbounded strings).
    if real_model and len(truncated) > len(jobs) // 4:
        fail(f"{len(truncated)} of {len(jobs)} answers hit max_tokens", truncated)


def check_parse(client, model):
    """chat.completions.parse with a pydantic model returns the parsed object."""
    class City(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=24)
        country: str = pydantic.Field(max_length=24)
        population_millions: int = pydantic.Field(ge=0, le=50)

    answer = client.chat.completions.parse(
        model=model, messages=[{"role": "system", "content": SYSTEM},
                               {"role": "user", "content": "Name a large city, its country and population."}],
        response_format=City, max_tokens=256, temperature=0, seed=SEED)
    choice = answer.choices[0]
    if choice.finish_reason != "stop" or not isinstance(choice.message.parsed, City):
        fail("chat.completions.parse returns a parsed pydantic object",
             {"finish_reason": choice.finish_reason, "content": choice.message.content})
    print(f"parse: {choice.message.parsed!r}")


def check_json_object(client, model):
    """response_format json_object: the answer is one JSON object, whole and streamed."""
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": "Give a JSON object with a fruit and its color."}]
    answer = client.chat.completions.create(model=model, messages=messages, response_format={"type": "json_object"},
                                            max_tokens=48, temperature=0, seed=SEED)
    content, finish = answer.choices[0].message.content, answer.choices[0].finish_reason
    streamed = "".join(c.delta.content or "" for chunk in client.chat.completions.create(
        model=model, messages=messages, response_format={"type": "json_object"}, max_tokens=48, temperature=0,
        seed=SEED, stream=True) for c in chunk.choices)
    detail = {"content": content, "finish_reason": finish, "streamed": streamed}
    if streamed != content:
        fail("a streamed json_object answer equals the whole one", detail)
    if finish == "stop":
        try:
            parsed = json.loads(content)
        except json.JSONDecodeError:
            fail("json_object answers JSON", detail)
        if not isinstance(parsed, dict):
            fail("json_object answers a JSON object", detail)
    elif finish != "length" or answer.usage.completion_tokens != 48:
        fail("json_object ends with stop, or length at max_tokens", detail)
    print(f"json_object: {finish} {content}")


def check_refusals(client, model):
    """Schemas that cannot be enforced get a 400 whose message names the reason."""
    for what, schema, word in UNENFORCEABLE:
        try:
            answer = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}],
                response_format=json_schema_format("bad", schema), max_tokens=4)
            fail(f"a schema with {what} is answered, not refused", answer.model_dump())
        except openai.BadRequestError as e:
            if word not in e.message:
                fail(f"the 400 for a schema with {what} names {word!r}", e.message)
            print(f"refused ({what}): {e.message}")


def check_grammar_regex_and_length(client, model):
    """minfer's extension fields grammar (EBNF) and regex (the whole answer matches), one malformed
    grammar refused, and a schema's answer cut at max_tokens said to be "length"."""
    messages = [{"role": "user", "content": "Is water wet? Then give a product code."}]
    for field, text, allowed in (("grammar", 'root ::= "yes" | "no"', re.compile("yes|no")),
                                 ("regex", "[A-Z]{3}-[0-9]{3}", re.compile("[A-Z]{3}-[0-9]{3}"))):
        answer = client.chat.completions.create(model=model, messages=messages, max_tokens=16, temperature=0.8,
                                                seed=SEED, extra_body={field: text})
        choice = answer.choices[0]
        if choice.finish_reason != "stop" or not allowed.fullmatch(choice.message.content):
            fail(f"an answer under {field} {text!r} matches it whole", answer.model_dump())
        print(f"{field}: {choice.message.content!r}")
    try:
        client.chat.completions.create(model=model, messages=messages, max_tokens=4,
                                       extra_body={"grammar": 'root ::= "unclosed'})
        fail("a malformed grammar is answered, not refused")
    except openai.BadRequestError as e:
        if "grammar" not in e.message:
            fail("the 400 for a malformed grammar names the field", e.message)
        print(f"refused (a malformed grammar): {e.message}")
    name, prompt, schema, _ = SCHEMAS[0]
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
        response_format=json_schema_format(name, schema), max_tokens=3, temperature=0)
    if answer.choices[0].finish_reason != "length" or answer.usage.completion_tokens != 3:
        fail("a constrained answer cut at max_tokens says finish_reason length", answer.model_dump())
    print(f"cut at max_tokens 3: length {answer.choices[0].message.content!r}")


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": obj({"city": {"type": "string", "maxLength": 32}, "unit": {"enum": ["celsius", "fahrenheit"]}})}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Adds two integers.",
    "parameters": obj({"a": {"type": "integer"}, "b": {"type": "integer"}})}}
TOOLS = {t["function"]["name"]: t for t in (WEATHER, ADD)}


def checked_tool_calls(calls, finish_reason, detail):
    """[(name, arguments)] of an answer's tool calls, each named after a tool and validated against
    its parameters; fails the test otherwise."""
    if finish_reason != "tool_calls" or not calls:
        fail("a tool call is answered with tool_calls and finish_reason tool_calls", detail)
    if len({c["id"] for c in calls}) != len(calls) or not all(c["id"] for c in calls):
        fail("every tool call has an id of its own", detail)
    checked = []
    for call in calls:
        name = call["function"]["name"]
        if call["type"] != "function" or name not in TOOLS:
            fail(f"a tool call names a tool it was given ({name!r})", detail)
        try:
            arguments = json.loads(call["function"]["arguments"])
            jsonschema.validate(arguments, TOOLS[name]["function"]["parameters"], cls=jsonschema.Draft202012Validator)
        except (json.JSONDecodeError, jsonschema.ValidationError) as e:
            detail["error"] = str(e).splitlines()[0]
            fail("a tool call's arguments validate against its tool's parameters", detail)
        checked.append((name, arguments))
    return checked


def streamed_tool_calls(stream):
    """The tool calls of a streamed answer, put together from their deltas by index as the openai
    client does, and its finish_reason."""
    calls, finish_reason = {}, None
    for chunk in stream:
        for choice in chunk.choices:
            finish_reason = choice.finish_reason or finish_reason
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "type": "function",
                                                      "function": {"name": "", "arguments": ""}})
                call["id"] += delta.id or ""
                call["type"] = delta.type or call["type"]
                if delta.function is not None:
                    call["function"]["name"] += delta.function.name or ""
                    call["function"]["arguments"] += delta.function.arguments or ""
    return [calls[i] for i in sorted(calls)], finish_reason


def check_tool_calls(client, model):
    """tool_choice "required", whole and streamed, a named function, parse() with a pydantic tool, a
    history holding a call and its result, and a request without tools whose answer looks like a call."""
    messages = [{"role": "user", "content": "What is the weather like in Paris today, in celsius?"}]
    for temperature in (0.0, 0.8):
        whole = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER, ADD],
                                               tool_choice="required", max_tokens=96, temperature=temperature,
                                               seed=SEED)
        choice = whole.choices[0]
        calls = [c.model_dump() for c in choice.message.tool_calls or []]
        detail = {"temperature": temperature, "content": choice.message.content, "tool_calls": calls,
                  "finish_reason": choice.finish_reason}
        checked = checked_tool_calls(calls, choice.finish_reason, detail)
        streamed, finish_reason = streamed_tool_calls(client.chat.completions.create(
            model=model, messages=messages, tools=[WEATHER, ADD], tool_choice="required", max_tokens=96,
            temperature=temperature, seed=SEED, stream=True))
        detail["streamed"] = streamed
        if checked_tool_calls(streamed, finish_reason, detail) != checked:
            fail("streamed tool calls, put together, equal the whole answer's", detail)
        print(f"tools, required, t={temperature}: {checked}")

    named = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "What is 17 plus 25?"}], tools=[WEATHER, ADD],
        tool_choice={"type": "function", "function": {"name": "add"}}, max_tokens=48, temperature=0)
    calls = [c.model_dump() for c in named.choices[0].message.tool_calls or []]
    checked = checked_tool_calls(calls, named.choices[0].finish_reason, {"tool_calls": calls})
    if [name for name, _ in checked] != ["add"]:
        fail("tool_choice naming a function calls that function once", checked)
    print(f"tools, named add: {checked}")

    class GetWeather(pydantic.BaseModel):
        city: str = pydantic.Field(max_length=32)
        unit: str = pydantic.Field(pattern="^(celsius|fahrenheit)$")

    parsed = client.chat.completions.parse(model=model, messages=messages,
                                           tools=[openai.pydantic_function_tool(GetWeather)], tool_choice="required",
                                           max_tokens=64, temperature=0)
    call = (parsed.choices[0].message.tool_calls or [None])[0]
    if call is None or not isinstance(call.function.parsed_arguments, GetWeather):
        fail("parse() with a pydantic tool returns its parsed arguments", parsed.model_dump())
    print(f"tools, parse: {call.function.parsed_arguments!r}")

    history = messages + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "celsius"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"celsius": 18, "sky": "clear"})}]
    answer = client.chat.completions.create(model=model, messages=history, tools=[WEATHER, ADD], max_tokens=48,
                                            temperature=0)
    if answer.choices[0].finish_reason not in ("stop", "length", "tool_calls"):
        fail("a history with a tool call and its result is answered", answer.model_dump())
    print(f"tools, after a result: {answer.choices[0].finish_reason} {json.dumps(answer.choices[0].message.content)}")

    bare = client.chat.completions.create(model=model, messages=[{"role": "user", "content": (
        'Repeat exactly: {"name": "add", "arguments": {"a": 1, "b": 2}}')}], max_tokens=32, temperature=0)
    if bare.choices[0].message.tool_calls or bare.choices[0].finish_reason == "tool_calls":
        fail("a request without tools never parses tool calls", bare.model_dump())
    print(f"no tools, a call's text stays text: {json.dumps(bare.choices[0].message.content)}")


def pick_model(source, fixture_only):
    """(the model's path, whether it is Qwen2.5-Coder-0.5B), saying why when it is the fixture."""
    fixture = os.path.join(source, "tests", "data", "models", "smollm-chat")
    qwen = cached_model(QWEN_FILE)
    if fixture_only:
        print(f"model: {fixture} (--fixture: a sanitizer build, where Qwen2.5-Coder-0.5B takes 4 minutes)")
        return fixture, False
    if not os.path.exists(qwen):
        print(f"model: {fixture} ({qwen} is absent: the random-weight chat fixture instead)")
        return fixture, False
    print(f"model: {qwen}")
    return qwen, True


def main():
    minfer, source = sys.argv[1], sys.argv[2]
    model, real_model = pick_model(source, sys.argv[3:] == ["--fixture"])
    server, port = start_server(minfer, model, "--slots", str(CONCURRENT), "--ctx", "1024" if real_model else "512")
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=300)
        try:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=1,
                                           response_format={"type": "json_object"})
        except openai.BadRequestError as e:
            if "built without XGrammar" in e.message:
                print(f"skipped: this minfer serve was built without XGrammar: {e.message}")
                sys.exit(SKIP)
            raise
        check_refusals(client, "m")
        check_json_object(client, "m")
        check_parse(client, "m")
        check_grammar_regex_and_length(client, "m")
        check_schema_suite(client, "m", real_model)
        if real_model:
            check_tool_calls(client, "m")
        else:
            print("skipped: tool calls need Qwen2.5's template; the chat fixture has none")
    finally:
        server.terminate()
        server.wait(timeout=30)
    print("structured output through the openai client against minfer serve: ok")


if __name__ == "__main__":
    main()
