"""The LALR parser's tables, precomputed and shipped as plain JSON beside the grammar.

Building the parser from `grammar.lark` costs ~85 ms per process; loading these tables
~30 ms. They are data only: JSON of lists, dicts, strings and numbers (no serialized
objects, no code), read from the installed package, never from a shared or temporary
folder. The file records the SHA-256 of the grammar it was made from; when the grammar
changes and the tables were not regenerated, the parser is built from the grammar
instead (and `tests/test_parser_tables.py` fails until `python -m infest.dsl.tables`
is run).
"""
from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

from lark import Lark
from lark.grammar import Rule
from lark.lexer import TerminalDef

TABLES_FILE = "grammar_tables.json"
LARK_OPTIONS = {"parser": "lalr", "propagate_positions": True, "maybe_placeholders": False}


def grammar_text() -> str:
    """The grammar shipped in the package."""
    return resources.files("infest.dsl").joinpath("grammar.lark").read_text()


def digest(text: str) -> str:
    """The SHA-256 a tables file records for the grammar it was made from."""
    return hashlib.sha256(text.encode()).hexdigest()


def load_parser(text: str, postlex: Any) -> Lark:
    """The parser for `text`: from the shipped tables when they match it, else built."""
    tables = _read_tables()
    if tables is None or tables.get("grammar_sha256") != digest(text):
        return Lark(text, postlex=postlex, **LARK_OPTIONS)
    return Lark.__new__(Lark)._load(tables["lark"], postlex=postlex)


def _read_tables() -> dict | None:
    path = resources.files("infest.dsl").joinpath(TABLES_FILE)
    if not path.is_file():
        return None
    return json.loads(path.read_text(), object_hook=_decode)


def tables_json(text: str) -> str:
    """The tables file's content for a grammar."""
    parser = Lark(text, **LARK_OPTIONS)
    data, memo = parser.memo_serialize([TerminalDef, Rule])
    data["options"] = {k: v for k, v in data["options"].items() if k != "postlex"}
    return json.dumps({"grammar_sha256": digest(text),
                       "lark": _encode({"data": data, "memo": memo})}, separators=(",", ":"))


def _encode(obj: Any) -> Any:
    """JSON-safe form: tuples and dicts with non-string keys are tagged, so that the
    tables load back with the same types Lark wrote (integer state numbers as keys)."""
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: _encode(v) for k, v in obj.items()}
        return {"__pairs__": [[_encode(k), _encode(v)] for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    raise TypeError(f"parser tables: cannot store a {type(obj).__name__}")


def _decode(obj: dict) -> Any:
    if len(obj) == 1 and "__tuple__" in obj:
        return tuple(obj["__tuple__"])
    if len(obj) == 1 and "__pairs__" in obj:
        return {(tuple(k) if isinstance(k, list) else k): v for k, v in obj["__pairs__"]}
    return obj


def main() -> None:
    """Regenerate the tables next to the grammar in the source tree, only when the
    grammar changed (Lark numbers its states in an order that varies between runs, so
    rewriting current tables would only churn the file)."""
    target = Path(__file__).with_name(TABLES_FILE)
    text = grammar_text()
    current = json.loads(target.read_text()) if target.is_file() else {}
    if current.get("grammar_sha256") == digest(text):
        print(f"{target} is up to date")
        return
    target.write_text(tables_json(text))
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
