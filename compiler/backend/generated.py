"""Load generated evaluation code: the sympy-free half of compiler/backend/codegen.py.

Generated source (from codegen, or read back from the private cache) is checked token
by token before it is compiled: besides Python keywords it may only name its own
functions, its arguments `a<i>`, temporaries `t<i>`, and `np` with the numpy functions
of `NP_FUNCTIONS`; its characters are those of arithmetic (no quotes, no comments). No name or text from a spec or the command line can reach it.
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np

NP_FUNCTIONS = frozenset({"floor", "ceil", "exp", "abs", "sign", "mod", "logical_not", "log",
                          "maximum", "minimum", "logical_and", "logical_or", "select",
                          "power", "sqrt", "where"})
FUNCTION_NAMES = frozenset({"forms", "constraints", "probe"})
_OTHER_NAMES = frozenset({"np", "nan", "inf", "default", "def", "return", "True", "False"})
_STRAY = re.compile(r"[^A-Za-z0-9_ \n()\[\],.:=+\-*/<>!%]")
_NAME = re.compile(r"(?<!\w)[A-Za-z_]\w*")  # not the e of 1.5e-07


def check_vocabulary(source: str) -> None:
    """Refuse any character or identifier the generator does not produce (defence in
    depth): no quotes, backslashes, comments or decorators can appear, and every name
    is one of ours."""
    stray = _STRAY.search(source)
    if stray:
        raise ValueError(f"generated code: unexpected character {stray.group()!r}")
    for name in _NAME.findall(source):
        if not (name in NP_FUNCTIONS or name in FUNCTION_NAMES or name in _OTHER_NAMES
                or (name[0] in "at" and name[1:].isdigit())):
            raise ValueError(f"generated code: unexpected name {name!r}")


def load_functions(source: str) -> dict[str, Callable]:
    """The functions a generated source defines, by name (after the vocabulary check)."""
    check_vocabulary(source)
    namespace = {"np": np, "nan": float("nan"), "inf": float("inf")}
    exec(compile(source, "<infest generated>", "exec"), namespace)  # noqa: S102 -- checked above
    return {name: namespace[name] for name in FUNCTION_NAMES if name in namespace}
