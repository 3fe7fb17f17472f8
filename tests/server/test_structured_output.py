"""Constrained decoding through the server, on a random model (which writes no JSON by itself):
response_format json_schema on 50 seeded requests, each answer validated against the schema
with the jsonschema package; the schemas of 20 Pydantic models with constrained fields (Debian's
python3-pydantic, 1.10), each answer parsed by its model; json_object; vLLM's guided_choice; a
schema keyword it does not support refused by name. Run by CTest through pytest
(tests/conftest.py)."""
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pydantic_models import MODELS  # noqa: E402
from server_fixture import Server, make_tiny_model  # noqa: E402

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



@pytest.fixture(scope="module")
def server(binary, work_dir):
    running = Server(binary, make_tiny_model(binary, os.path.join(work_dir, "tiny")), "--kv-cache-gb", "0.25")
    yield running
    assert running.stop() == 0, "the server exits 0"


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


def test_json_schema_answers_are_valid_and_free_ones_are_not(server):
    response_format = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda seed: chat(server, seed, response_format=response_format), range(50)))
        free = list(pool.map(lambda seed: chat(server, seed, max_tokens=60), range(50)))
    invalid = []
    for seed, (status, body) in enumerate(answers):
        choice = body["choices"][0] if status == 200 else {}
        text = choice.get("message", {}).get("content", "")
        if not (status == 200 and choice.get("finish_reason") == "stop" and valid_under_schema(text)):
            invalid.append((seed, status, body))
    assert not invalid, f"{len(invalid)} of 50 answers not valid under the schema: {invalid[:2]}"
    unconstrained = sum(valid_under_schema(body["choices"][0]["message"]["content"]) for status, body in free
                        if status == 200)
    assert unconstrained == 0, "unconstrained, the random model writes no valid JSON"


@pytest.mark.parametrize("seed", range(10))
def test_json_object(server, seed):
    """Without a schema nothing bounds a string, so some answers run to max_tokens: those must be
    cut JSON, and every answer that ended by itself a whole object."""
    status, body = chat(server, 100 + seed, response_format={"type": "json_object"})
    assert status == 200, body
    choice = body["choices"][0]
    text = choice["message"]["content"]
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(text), dict), repr(text)
    else:
        assert choice["finish_reason"] == "length" and text.startswith("{"), body


def test_json_object_answers_end_by_themselves(server):
    finished = [chat(server, 100 + seed, response_format={"type": "json_object"})[1]["choices"][0]["finish_reason"]
                for seed in range(10)]
    assert "stop" in finished, finished


def test_guided_choice_answers_one_of_the_choices(server):
    status, body = server.request("POST", "/v1/completions", {"prompt": "Pick:", "max_tokens": 20, "temperature": 1.0,
                                                              "seed": 3, "guided_choice": ["yes", "no", "maybe"]})
    assert status == 200 and body["choices"][0]["text"] in ("yes", "no", "maybe"), body


def test_unsupported_formats_are_refused_by_name(server):
    status, body = chat(server, 1, response_format={"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "integer", "multipleOf": 3}}})
    assert status == 400 and "'multipleOf'" in body["error"]["message"], body
    assert body["error"]["param"] == "response_format"
    status, body = chat(server, 1, response_format={"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "string", "pattern": "^(?!a)b+$"}}})
    assert status == 400 and "lookarounds" in body["error"]["message"], body
    status, body = chat(server, 1, response_format={"type": "yaml"})
    assert status == 400 and body["error"]["param"] == "response_format", body


@pytest.mark.parametrize("name", sorted(MODELS))
def test_pydantic_schemas_decode_to_valid_instances(server, name):
    """Each model's own JSON schema (titles, definitions, $refs, constrained types, formats and
    all, as Pydantic writes it) constrains the answer, and the model parses it."""
    model = MODELS[name]
    response_format = {"type": "json_schema", "json_schema": {"name": name, "schema": model.schema()}}
    for seed in range(3):
        status, body = chat(server, 1000 + seed, response_format=response_format, max_tokens=1500)
        assert status == 200, body
        choice = body["choices"][0]
        assert choice["finish_reason"] == "stop", body
        model.parse_raw(choice["message"]["content"])  # raises on an invalid instance
