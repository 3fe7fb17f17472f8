"""Constrained decoding through the server, on a random model (which writes no JSON by itself):
response_format json_schema on 50 seeded requests, each answer validated against the schema
with the jsonschema package; json_object; vLLM's guided_choice; a schema keyword it does not
support refused by name. Usage: test_structured_output.py MLASERVE WORK_DIR"""
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_fixture import Checks, Server, make_tiny_model  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0},
        "score": {"type": "number"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 4},
        "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                                      "zip": {"type": "string", "maxLength": 5}},
                    "required": ["city"], "additionalProperties": False},
        "active": {"type": "boolean"},
        "nickname": {"type": ["string", "null"], "maxLength": 6},
    },
    "required": ["name", "age", "tags", "address", "active"],
    "additionalProperties": False,
}

check = Checks()


def chat(server, seed, **fields):
    body = {"messages": [{"role": "user", "content": "Describe a person as JSON."}], "temperature": 1.0, "seed": seed,
            "max_tokens": 400, **fields}
    return server.request("POST", "/v1/chat/completions", body)


def valid_under_schema(text):
    try:
        jsonschema.validate(json.loads(text), SCHEMA)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def json_schema_requests(server):
    response_format = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda seed: chat(server, seed, response_format=response_format), range(50)))
        free = list(pool.map(lambda seed: chat(server, seed, max_tokens=60), range(50)))
    valid = 0
    for seed, (status, body) in enumerate(answers):
        choice = body["choices"][0] if status == 200 else {}
        text = choice.get("message", {}).get("content", "")
        ok = status == 200 and choice.get("finish_reason") == "stop" and valid_under_schema(text)
        valid += ok
        check(f"json_schema seed {seed}: valid under the schema", ok, f"{status} {body}")
    print(f"json_schema: {valid} of 50 answers valid under the schema")
    unconstrained = sum(valid_under_schema(body["choices"][0]["message"]["content"]) for status, body in free if status == 200)
    check("unconstrained, the random model writes no valid JSON", unconstrained == 0, f"{unconstrained} valid")


def other_formats(server):
    # Without a schema nothing bounds a string, so some answers run to max_tokens: those must be
    # cut JSON, and every answer that ended by itself a whole object.
    finished = 0
    for seed in range(10):
        status, body = chat(server, 100 + seed, response_format={"type": "json_object"})
        choice = body["choices"][0] if status == 200 else {}
        text = choice.get("message", {}).get("content", "")
        if choice.get("finish_reason") == "stop":
            finished += 1
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            check(f"json_object seed {seed}: an object", isinstance(parsed, dict), repr(text))
        else:
            check(f"json_object seed {seed}: cut at max_tokens, an object begun", choice.get("finish_reason") == "length"
                  and text.startswith("{"), f"{status} {body}")
    check("json_object: some answers end by themselves", finished > 0, finished)
    status, body = server.request("POST", "/v1/completions", {"prompt": "Pick:", "max_tokens": 20, "temperature": 1.0,
                                                              "seed": 3, "guided_choice": ["yes", "no", "maybe"]})
    text = body["choices"][0]["text"] if status == 200 else ""
    check("guided_choice: one of the choices", text in ("yes", "no", "maybe"), f"{status} {text!r}")
    status, body = chat(server, 1, response_format={"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "string", "pattern": "^a+$"}}})
    check("an unsupported schema keyword is a 400 naming it",
          status == 400 and "'pattern'" in body["error"]["message"] and body["error"]["param"] == "response_format", body)
    status, body = chat(server, 1, response_format={"type": "yaml"})
    check("an unknown response_format type is a 400", status == 400 and body["error"]["param"] == "response_format", body)


def main():
    binary, work = sys.argv[1], sys.argv[2]
    server = Server(binary, make_tiny_model(binary, os.path.join(work, "tiny")), "--kv-cache-gb", "0.25")
    try:
        json_schema_requests(server)
        other_formats(server)
    finally:
        check("server exits 0", server.stop() == 0)
    check.finish()


if __name__ == "__main__":
    main()
