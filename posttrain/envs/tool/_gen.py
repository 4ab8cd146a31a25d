"""Procedural tool-use tasks: a few OpenAI function schemas, a request, the expected call(s).

Each task lists 3 tools (the right one(s) plus distractors); about a quarter ask for two
independent calls (unordered). No generated task expects "no call": a do-nothing response must
fail every task (reward-hacking.md AGENT-01). The reference response writes ``<tool_call>`` blocks or an OpenAI
``tool_calls`` message, alternating, so both formats are exercised.
"""

from __future__ import annotations

import json
import random
from typing import Any

from posttrain.types import Task


def _fn(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": required,
                           "additionalProperties": False},
        },
    }


TOOLS = {
    "get_weather": _fn("get_weather", "Current weather in a city.",
                       {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                       ["city", "unit"]),
    "convert_currency": _fn("convert_currency", "Convert an amount between currencies.",
                            {"amount": {"type": "number"}, "from_currency": {"type": "string"},
                             "to_currency": {"type": "string"}},
                            ["amount", "from_currency", "to_currency"]),
    "set_alarm": _fn("set_alarm", "Set an alarm at a time of day (24h HH:MM).",
                     {"time": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"}, "label": {"type": "string"}},
                     ["time"]),
    "search_flights": _fn("search_flights", "Search flights on a date (YYYY-MM-DD): direct ones, unless max_stops "
                          "allows connections.",
                          {"origin": {"type": "string"}, "destination": {"type": "string"},
                           "date": {"type": "string"}, "max_stops": {"type": "integer", "minimum": 0, "default": 0}},
                          ["origin", "destination", "date"]),
}
_CITIES = ("Paris", "Tokyo", "Nairobi", "Lima", "Oslo", "Denver", "Seoul", "Accra")
_CURRENCIES = ("USD", "EUR", "JPY", "GBP", "KES", "PEN")


def _weather(rng: random.Random) -> tuple[str, dict[str, Any]]:
    city, unit = rng.choice(_CITIES), rng.choice(["celsius", "fahrenheit"])
    return f"What's the weather in {city} right now, in {unit}?", {
        "name": "get_weather", "arguments": {"city": city, "unit": unit}}


def _currency(rng: random.Random) -> tuple[str, dict[str, Any]]:
    a, b = rng.sample(_CURRENCIES, 2)
    amount = rng.choice([rng.randint(1, 5000), round(rng.uniform(1, 500), 2)])
    return f"How much is {amount} {a} in {b}?", {
        "name": "convert_currency", "arguments": {"amount": amount, "from_currency": a, "to_currency": b}}


def _alarm(rng: random.Random) -> tuple[str, dict[str, Any]]:
    h, m = rng.randint(0, 23), rng.choice([0, 15, 30, 45])
    label = rng.choice([None, "gym", "call mom", "meds"])
    args: dict[str, Any] = {"time": f"{h:02d}:{m:02d}"}
    text = f"Set an alarm for {h:02d}:{m:02d}"
    if label:
        args["label"] = label
        text += f" labelled '{label}'"
    return text + ".", {"name": "set_alarm", "arguments": args}


def _flight(rng: random.Random) -> tuple[str, dict[str, Any]]:
    a, b = rng.sample(_CITIES, 2)
    date = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    return f"Find flights from {a} to {b} on {date}.", {
        "name": "search_flights", "arguments": {"origin": a, "destination": b, "date": date},
        "optional": ["max_stops"]}


_MAKERS = (_weather, _currency, _alarm, _flight)


def _reference(calls: list[dict[str, Any]], style: int) -> str:
    if style == 0:
        return "".join(
            f"<tool_call>{json.dumps({'name': c['name'], 'arguments': c['arguments']})}</tool_call>\n" for c in calls)
    return json.dumps({"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{i}", "type": "function",
         "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
        for i, c in enumerate(calls)]})


def generate(rng: random.Random, tid: str) -> Task:
    n_calls = 2 if rng.random() > 0.75 else 1
    made = [m(rng) for m in rng.sample(_MAKERS, n_calls)]
    prompt = " Also, ".join(p for p, _ in made)
    expected = [e for _, e in made]
    needed = [e["name"] for e in expected]
    others = [n for n in sorted(TOOLS) if n not in needed]
    names = sorted(needed + rng.sample(others, 3 - len(needed)))
    reference = _reference(expected, rng.randint(0, 1))
    return Task(
        id=tid,
        domain="tool",
        prompt=prompt,
        fields={"tools": [TOOLS[n] for n in names], "expected_calls": expected, "ordered": False},
        reference=reference,
        tags=("tool", f"{len(expected)}-calls"),
        metadata={"generator": "tool/basic"},
    )
