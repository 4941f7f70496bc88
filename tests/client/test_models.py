"""The client's result models against the service's OpenAPI document: any drift fails here.

The client cannot import the server's schemas (it ships no server code), so it mirrors them;
this test compares every mirrored model's fields, their JSON types and nullability with the
schema the service publishes.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from app.config import Settings
from app.main import create_app
from rhosynth.models import SERVER_NAMES

SERVER = create_app(Settings()).openapi()["components"]["schemas"]
CLIENT_TO_SERVER = {model.__name__: name for model, name in SERVER_NAMES.items()}


def shape(schema: dict[str, Any], names: dict[str, str]) -> Any:
    """A field's JSON shape, without titles, descriptions and defaults; references renamed
    through ``names`` (client model name -> server name)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return ("ref", names.get(name, name))
    if "anyOf" in schema:
        return ("anyOf", frozenset(shape(item, names) for item in schema["anyOf"]))
    kind = schema.get("type")
    if kind == "array":
        return ("array", shape(schema.get("items", {}), names))
    if kind == "object":
        extra = schema.get("additionalProperties")
        return ("object", shape(extra, names) if isinstance(extra, dict) else extra)
    return (
        kind,
        schema.get("format"),
        tuple(schema.get("enum", ())),
        schema.get("const"),
    )


@pytest.mark.parametrize("model", list(SERVER_NAMES), ids=lambda m: m.__name__)
def test_client_model_matches_the_servers_openapi(model: type[BaseModel]) -> None:
    server = SERVER[SERVER_NAMES[model]]
    client = model.model_json_schema(
        mode="serialization", by_alias=True, ref_template="#/$defs/{model}"
    )
    assert set(client["properties"]) == set(server["properties"]), SERVER_NAMES[model]
    for field, server_schema in server["properties"].items():
        assert shape(client["properties"][field], CLIENT_TO_SERVER) == shape(server_schema, {}), (
            f"{SERVER_NAMES[model]}.{field}"
        )


def test_every_response_model_the_client_reads_is_mirrored() -> None:
    # The nested models of those the client returns are mirrored too (else a $ref above would
    # name a server model the client lacks).
    referenced: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "$ref" in node:
                referenced.add(node["$ref"].rsplit("/", 1)[1])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for name in SERVER_NAMES.values():
        walk(SERVER[name])
    assert referenced <= set(SERVER_NAMES.values())


def test_a_drifted_model_is_caught() -> None:
    # The comparison is not vacuous: a renamed and a retyped field both differ.
    server = SERVER["ProgressOut"]["properties"]
    assert shape({"type": "integer"}, {}) != shape(server["fraction"], {})
    assert shape({"type": "string", "format": "decimal"}, {}) != shape(
        {"anyOf": [{"type": "string", "format": "decimal"}, {"type": "null"}]}, {}
    )
