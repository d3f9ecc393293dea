"""`infest` command line. Imports stay light here so `infest --help` is instant; each
verb's module (and sympy with it) is imported only when that verb runs."""
from __future__ import annotations

import argparse
import importlib
import sys

# verb -> (module under infest.exports, one-line help)
VERBS = {
    "compile": ("cmd_compile", "print closed forms (or write a live workbook with --xlsx)"),
    "eval": ("cmd_eval", "evaluate a model on hardware: per-op table, memory, step bound"),
    "sweep": ("cmd_sweep", "evaluate a metric over a B x N grid (vectorised)"),
    "diagnose": ("cmd_diagnose", "which ceiling binds a measured system (bandwidth, comm, launch, occupancy)"),
    "serve": ("cmd_serve", "TTFT, TPOT, E2E and tokens/s for a request shape and a concurrency"),
    "plan": ("cmd_plan", "fewest GPUs (layout, concurrency) meeting TPOT/TTFT limits for a demand"),
    "calibrate": ("cmd_calibrate", "fit eff_mem/eff_flops/eff_link to measured step times (CSV)"),
    "list": ("cmd_list", "list shipped models and hardware"),
    "import-hf": ("cmd_import_hf", "write a .arch spec from a Hugging Face config.json"),
}


class _Parser(argparse.ArgumentParser):
    """Bad arguments exit 1 (the contract), not argparse's 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(1)


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's `version`)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("infest")
    except PackageNotFoundError:
        return "unknown (not installed: pip install .)"


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one sub-parser per verb (built lazily on use)."""
    parser = _Parser(prog="infest", description="Symbolic performance models of LLM inference.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--version", action="version", version=f"infest {package_version()}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    for verb, (_, help_text) in VERBS.items():
        sub.add_parser(verb, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point: dispatch to the verb's module; SpecError -> message and exit 1."""
    argv = sys.argv[1:] if argv is None else argv
    top = build_parser()
    words = [a for a in argv if not a.startswith("-")]
    verb = words[0] if words and words[0] in VERBS else None
    if verb is None:
        top.parse_args(argv)  # prints help / errors for bad top-level use
        top.print_help()
        return 1
    debug = "--debug" in argv
    rest = [a for a in argv[argv.index(verb) + 1:] if a != "--debug"]
    module = importlib.import_module(f"infest.exports.cli.{VERBS[verb][0]}")
    verb_parser = _Parser(prog=f"infest {verb}", description=VERBS[verb][1])
    module.add_arguments(verb_parser)
    args = verb_parser.parse_args(rest)
    return _run(module, args, debug)


def _run(module, args: argparse.Namespace, debug: bool) -> int:
    from infest.dsl.errors import SpecError
    try:
        return int(module.run(args) or 0)
    except BrokenPipeError:
        return 0
    except (SpecError, OSError) as exc:  # bad input, or a file that cannot be read/written
        if debug:
            raise
        message = str(exc) if isinstance(exc, SpecError) else f"error: {_os_error(exc)}"
        _release_quietly(exc)
        sys.stderr.write(f"{message}\n")
        return 1


def _os_error(exc: OSError) -> str:
    """`cannot write '/x/y.xlsx': No such file or directory`, without a traceback."""
    from infest.dsl.errors import printable
    where = f" '{printable(str(exc.filename))}'" if exc.filename else ""
    return f"cannot access{where}: {exc.strerror or exc}"


def _release_quietly(exc: BaseException) -> None:
    """Free the failed call's frames now, with destructor errors muted: a half-written
    workbook (a full disk) closes its zip file in a destructor, which would otherwise
    print a second traceback ("Exception ignored in ZipFile.__del__") at exit."""
    import gc
    hook, sys.unraisablehook = sys.unraisablehook, lambda _: None
    try:
        exc.__traceback__ = None
        gc.collect()
    finally:
        sys.unraisablehook = hook


if __name__ == "__main__":
    sys.exit(main())
