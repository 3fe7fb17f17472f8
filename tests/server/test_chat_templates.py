"""A checkpoint's chat template served end to end, on a random model: DeepSeek-V3.1's template
(--chat-template) with chat_template_kwargs thinking on (the prompt ends in <think>, so the
output is reasoning_content) and off (content); a tool call and its result replayed; the output
parsers the template implies in the start-up log; a template that does not parse stops the server
at start-up naming its line. Run by CTest through pytest (tests/conftest.py)."""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_fixture import Server, make_tiny_model  # noqa: E402

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "chat_templates")
ASK = {"messages": [{"role": "user", "content": "Why is the sky blue?"}], "max_tokens": 8, "temperature": 0,
       "ignore_eos": True}


@pytest.fixture(scope="module")
def tiny(binary, work_dir):
    return make_tiny_model(binary, os.path.join(work_dir, "tiny"))


@pytest.fixture(scope="module")
def server(binary, tiny):
    running = Server(binary, tiny, "--kv-cache-gb", "0.25", "--chat-template",
                     os.path.join(TEMPLATES, "deepseek-v3.1.jinja"))
    yield running
    assert running.stop() == 0, "the server exits 0"


def test_the_templates_formats_are_parsed(server):
    log = "".join(server.log_lines)
    assert "tool calls deepseek_v31, reasoning <think> blocks" in log, log[-600:]


def test_thinking_on_makes_the_output_reasoning(server):
    status, on = server.request("POST", "/v1/chat/completions", {**ASK, "chat_template_kwargs": {"thinking": True}})
    assert status == 200, on
    message = on["choices"][0]["message"]
    assert message.get("reasoning_content") and message.get("content") == "", on


def test_thinking_off_makes_the_output_content(server):
    status, off = server.request("POST", "/v1/chat/completions", {**ASK, "chat_template_kwargs": {"thinking": False}})
    assert status == 200, off
    message = off["choices"][0]["message"]
    assert message.get("content") and message.get("reasoning_content") is None, off


def test_thinking_streamed_as_reasoning_deltas(server):
    status, events = server.stream("/v1/chat/completions",
                                   {**ASK, "stream": True, "chat_template_kwargs": {"thinking": True}})
    assert status == 200 and any('"reasoning_content"' in e for e in events), events[:3]


def test_a_tool_call_and_its_result_replayed(server):
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    replay = messages + [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                          "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                         {"role": "tool", "tool_call_id": "call_1", "content": "{\"celsius\": 3}"}]
    # DeepSeek-V3.1's template leaves tool descriptions to the system prompt; it writes calls and results.
    _, plain = server.request("POST", "/tokenize", {"messages": messages})
    _, replayed = server.request("POST", "/tokenize", {"messages": replay, "tools": tools})
    assert replayed["count"] > plain["count"] + 20, [plain, replayed]
    status, body = server.request("POST", "/v1/chat/completions", {"messages": replay, "tools": tools, "max_tokens": 4})
    assert status == 200 and body["choices"][0]["message"]["role"] == "assistant", body


def test_a_template_that_does_not_parse_stops_the_server(binary, tiny, work_dir):
    path = os.path.join(work_dir, "bad.jinja")
    with open(path, "w") as out:
        out.write("{{ bos_token }}\n{% for m in messages %}{{ m.content | shout }}{% endfor %}")
    result = subprocess.run([binary, "serve", "--model", tiny, "--port", "0", "--chat-template", path],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "bad.jinja" in result.stderr and "line 2" in result.stderr, result.stderr[-400:]
