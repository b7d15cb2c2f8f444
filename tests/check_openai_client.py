#!/usr/bin/env python3
"""The official `openai` Python package against `minfer serve`: chat and text completions,
streamed and not, and an error it must raise, with the chat fixture (tests/data/models/smollm-chat,
a real tokenizer and SmolLM2's chat template).

The package is installed from PyPI into a virtualenv outside the repository, made once and then
reused (tests/openai_client_support.py). Without PyPI the test is skipped (exit 77) and says so.

  check_openai_client.py MINFER SOURCE_DIR
"""
import json
import os
import subprocess
import sys

from openai_client_support import start_server, venv_python


# Runs inside the virtualenv: the client's calls, each checked; prints one JSON line of results.
CLIENT = r'''
import json, sys
import openai
base = sys.argv[1]
client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=120)
out = {}
messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello!"}]

chat = client.chat.completions.create(model="smollm-chat", messages=messages, max_tokens=16, temperature=0, seed=0)
out["chat"] = {"content": chat.choices[0].message.content, "role": chat.choices[0].message.role,
               "finish": chat.choices[0].finish_reason, "usage": chat.usage.model_dump(), "object": chat.object}

stream = client.chat.completions.create(model="smollm-chat", messages=messages, max_completion_tokens=16,
                                        temperature=0, stream=True, stream_options={"include_usage": True})
text, role, finish, usage = "", None, None, None
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage.model_dump()
    for c in chunk.choices:
        role = role or c.delta.role
        text += c.delta.content or ""
        finish = c.finish_reason or finish
out["chat_stream"] = {"content": text, "role": role, "finish": finish, "usage": usage}

done = client.completions.create(model="smollm-chat", prompt="Once upon a time", max_tokens=12, temperature=0)
out["completion"] = {"text": done.choices[0].text, "finish": done.choices[0].finish_reason,
                     "usage": done.usage.model_dump()}
text, finish = "", None
for chunk in client.completions.create(model="smollm-chat", prompt="Once upon a time", max_tokens=12,
                                       temperature=0, stream=True):
    for c in chunk.choices:
        text += c.text
        finish = c.finish_reason or finish
out["completion_stream"] = {"text": text, "finish": finish}

try:
    client.chat.completions.create(model="smollm-chat", messages=messages, n=9)
    out["error"] = None
except openai.BadRequestError as e:
    out["error"] = {"status": e.status_code, "message": e.message}
print(json.dumps(out))
'''


def check(condition, what, results):
    if not condition:
        sys.exit(f"FAIL: {what}\n{json.dumps(results, indent=2)}")


def main():
    minfer, source = sys.argv[1], sys.argv[2]
    python = venv_python()
    model = os.path.join(source, "tests", "data", "models", "smollm-chat")
    server, port = start_server(minfer, model, "--slots", "2", "--ctx", "256")
    try:
        run = subprocess.run([python, "-c", CLIENT, f"http://127.0.0.1:{port}/v1"], capture_output=True, text=True,
                             timeout=300)
        if run.returncode != 0:
            sys.exit(f"FAIL: the openai client raised:\n{run.stderr}")
        r = json.loads(run.stdout.strip().splitlines()[-1])
    finally:
        server.terminate()
        server.wait(timeout=30)
    chat, stream = r["chat"], r["chat_stream"]
    check(chat["object"] == "chat.completion" and chat["role"] == "assistant", "a chat.completion's message", r)
    check(chat["finish"] in ("stop", "length"), "a chat's finish_reason", r)
    check(1 <= chat["usage"]["completion_tokens"] <= 16 or chat["finish"] == "stop", "a chat's usage", r)
    check(chat["usage"]["prompt_tokens"] > 10, "the chat prompt is the rendered template", r)
    check(stream["content"] == chat["content"] and stream["role"] == "assistant", "a streamed chat equals the whole", r)
    check(stream["finish"] == chat["finish"] and stream["usage"]["completion_tokens"] == chat["usage"]["completion_tokens"],
          "a streamed chat's finish_reason and usage", r)
    # The second chat repeats the first one's prompt: all but its last token come from the cache, of
    # which a client is told whole blocks of 64 only (the block size at --ctx 256).
    check(stream["usage"]["prompt_tokens_details"]["cached_tokens"] == (chat["usage"]["prompt_tokens"] - 1) // 64 * 64,
          "the repeated prompt is served from the cache, in whole blocks", r)
    check(r["completion"]["text"] == r["completion_stream"]["text"] and r["completion"]["finish"] ==
          r["completion_stream"]["finish"], "a streamed completion equals the whole", r)
    check(r["completion"]["usage"]["completion_tokens"] >= 1, "a completion's usage", r)
    check(r["error"] is not None and r["error"]["status"] == 400 and "n = 9: 1 to 8 choices" in r["error"]["message"],
          "n = 9 raises BadRequestError naming n", r)
    print("openai client: chat.completions.create and completions.create, streamed and whole, against minfer serve: ok")
    print(json.dumps(r["chat"]))


if __name__ == "__main__":
    main()
