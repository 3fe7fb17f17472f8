"""A checkpoint's chat template served end to end, on a random model: DeepSeek-V3.1's template
(--chat-template) with chat_template_kwargs thinking on (the prompt ends in <think>, so the
output is reasoning_content) and off (content); a tool call and its result replayed; the output
parsers the template implies in the start-up log; a template that does not parse stops the server
at start-up naming its line. Usage: test_chat_templates.py MLASERVE WORK_DIR"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_fixture import Checks, Server, make_tiny_model  # noqa: E402

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "chat_templates")
check = Checks()


def thinking(server):
    ask = {"messages": [{"role": "user", "content": "Why is the sky blue?"}], "max_tokens": 8, "temperature": 0,
           "ignore_eos": True}
    status, on = server.request("POST", "/v1/chat/completions", {**ask, "chat_template_kwargs": {"thinking": True}})
    message = on["choices"][0]["message"] if status == 200 else {}
    check("thinking on: the prompt opened <think>, the output is reasoning",
          status == 200 and message.get("reasoning_content") and message.get("content") == "", on)
    status, off = server.request("POST", "/v1/chat/completions", {**ask, "chat_template_kwargs": {"thinking": False}})
    message = off["choices"][0]["message"] if status == 200 else {}
    check("thinking off: the output is content", status == 200 and message.get("content")
          and message.get("reasoning_content") is None, off)
    status, events = server.stream("/v1/chat/completions", {**ask, "stream": True, "chat_template_kwargs": {"thinking": True}})
    check("thinking on, streamed: reasoning_content deltas", status == 200 and any('"reasoning_content"' in e for e in events),
          events[:3])


def tool_turns(server):
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    replay = messages + [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                          "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                         {"role": "tool", "tool_call_id": "call_1", "content": "{\"celsius\": 3}"}]
    # DeepSeek-V3.1's template leaves tool descriptions to the system prompt; it writes calls and results.
    _, plain = server.request("POST", "/tokenize", {"messages": messages})
    _, replayed = server.request("POST", "/tokenize", {"messages": replay, "tools": tools})
    check("the template renders the tool call and its result", replayed["count"] > plain["count"] + 20, [plain, replayed])
    status, body = server.request("POST", "/v1/chat/completions", {"messages": replay, "tools": tools, "max_tokens": 4})
    check("a tool call and its result replayed", status == 200 and body["choices"][0]["message"]["role"] == "assistant", body)


def bad_template(binary, model, work):
    path = os.path.join(work, "bad.jinja")
    with open(path, "w") as out:
        out.write("{{ bos_token }}\n{% for m in messages %}{{ m.content | shout }}{% endfor %}")
    result = subprocess.run([binary, "serve", "--model", model, "--port", "0", "--chat-template", path],
                            capture_output=True, text=True, timeout=120)
    check("a template that does not parse stops the server, naming its line",
          result.returncode != 0 and "bad.jinja" in result.stderr and "line 2" in result.stderr, result.stderr[-400:])


def main():
    binary, work = sys.argv[1], sys.argv[2]
    model = make_tiny_model(binary, os.path.join(work, "tiny"))
    server = Server(binary, model, "--kv-cache-gb", "0.25", "--chat-template", os.path.join(TEMPLATES, "deepseek-v3.1.jinja"))
    try:
        log = "".join(server.log_lines)
        check("the template's formats are parsed", "tool calls deepseek_v31, reasoning <think> blocks" in log, log[-600:])
        thinking(server)
        tool_turns(server)
    finally:
        check("server exits 0", server.stop() == 0)
    bad_template(binary, model, work)
    check.finish()


if __name__ == "__main__":
    main()
