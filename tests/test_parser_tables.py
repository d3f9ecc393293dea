"""The shipped parser tables (dsl/grammar_tables.json) are current and equivalent."""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from lark import Lark

from infest.dsl import parser
from infest.dsl.tables import LARK_OPTIONS, TABLES_FILE, digest, grammar_text

SPECS = sorted(Path(__file__).parents[1].joinpath("specs").rglob("*.arch"))


def test_tables_are_made_from_the_shipped_grammar():
    tables = json.loads(resources.files("infest.dsl").joinpath(TABLES_FILE).read_text())
    assert tables["grammar_sha256"] == digest(grammar_text()), \
        "grammar.lark changed: run `python -m infest.dsl.tables`"


def test_loaded_parser_parses_like_a_built_one():
    built = Lark(grammar_text(), postlex=parser._Newlines(), **LARK_OPTIONS)
    loaded = parser._lark()
    assert type(loaded.parser) is type(built.parser) and len(SPECS) >= 10
    for spec in SPECS:
        text = spec.read_text()
        assert loaded.parse(text) == built.parse(text), spec
