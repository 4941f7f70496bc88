"""Form fields generated from a method's ``params_schema()`` and parsed back into ``params``.

The console only turns form text into JSON values; the job's params are validated by the same
``JobRequest`` model and mechanism as an API submission, so the rules live in one place.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

PARAM_PREFIX = "param."


@dataclass(frozen=True)
class ParamField:
    """One input of the generated form."""

    name: str
    title: str
    kind: str  # "integer", "number", "boolean", "enum", "string" or "json"
    description: str
    default: Any
    nullable: bool
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None

    @property
    def input_name(self) -> str:
        return PARAM_PREFIX + self.name

    @property
    def default_text(self) -> str:
        """The default as the form shows it."""
        if self.default is None:
            return ""
        if self.kind == "json":
            return json.dumps(self.default)
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return str(self.default)


def _simple(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The one non-null alternative of an ``anyOf`` (and whether null is allowed), or itself."""
    options = schema.get("anyOf")
    if not isinstance(options, list):
        return schema, False
    non_null = [o for o in options if isinstance(o, dict) and o.get("type") != "null"]
    nullable = len(non_null) < len(options)
    if len(non_null) == 1:
        return non_null[0], nullable
    return {}, nullable


def param_fields(params_schema: dict[str, Any]) -> list[ParamField]:
    """The form's fields, in the schema's order."""
    fields = []
    properties = params_schema.get("properties", {})
    for name, raw in properties.items():
        spec, nullable = _simple(raw)
        kind = spec.get("type")
        choices: tuple[str, ...] = ()
        if "enum" in spec and all(isinstance(v, str) for v in spec["enum"]):
            kind, choices = "enum", tuple(spec["enum"])
        elif kind not in ("integer", "number", "boolean", "string"):
            kind = "json"
        minimum = spec.get("minimum", spec.get("exclusiveMinimum"))
        maximum = spec.get("maximum", spec.get("exclusiveMaximum"))
        fields.append(
            ParamField(
                name=name,
                title=str(raw.get("title", name)),
                kind=str(kind),
                description=str(raw.get("description", "")),
                default=raw.get("default"),
                nullable=nullable,
                choices=choices,
                minimum=minimum if isinstance(minimum, int | float) else None,
                maximum=maximum if isinstance(maximum, int | float) else None,
            )
        )
    return fields


class ParamError(ValueError):
    """A form value that is not of its field's type (names the field, never a data value)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def parse_params(fields: list[ParamField], form: dict[str, str]) -> dict[str, Any]:
    """``params`` for the request from the form's text. An empty field is left out (the
    method's default applies); a boolean is sent as chosen."""
    params: dict[str, Any] = {}
    for field in fields:
        text = form.get(field.input_name, "").strip()
        if text == "":
            continue
        try:
            if field.kind == "integer":
                params[field.name] = int(text)
            elif field.kind == "number":
                value = float(text)
                if not math.isfinite(value):
                    raise ValueError("not finite")
                params[field.name] = value
            elif field.kind == "boolean":
                if text not in ("true", "false"):
                    raise ValueError("choose true or false")
                params[field.name] = text == "true"
            elif field.kind in ("enum", "string"):
                params[field.name] = text
            else:
                params[field.name] = json.loads(text)
        except ValueError as error:
            message = str(error) if field.kind == "boolean" else f"not a valid {field.kind}"
            raise ParamError(field.name, message) from None
    return params
