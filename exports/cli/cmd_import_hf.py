"""`infest import-hf`: write a .arch spec from a Hugging Face config.json."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    """CONFIG [-o OUT] [--quant-config PATH] [--gguf TYPE] [--name NAME]."""
    p.add_argument("config", metavar="CONFIG", help="a Hugging Face config.json")
    p.add_argument("-o", "--out", "--output", dest="output", metavar="OUT",
                   help="write the spec here (default: print it to stdout)")
    p.add_argument("--quant-config", metavar="PATH",
                   help="a ModelOpt hf_quant_config.json (default: one next to CONFIG, "
                        "named hf_quant_config.json, <stem>.hf_quant_config.json or "
                        "<stem>_hf_quant_config.json)")
    p.add_argument("--gguf", metavar="TYPE",
                   help="weights as a GGUF quantization mix (Q4_K_M, Q8_0, ...) at its mean "
                        "bits per weight")
    p.add_argument("--name", metavar="NAME",
                   help="the model's name in the spec (default: from OUT or CONFIG's name)")


def run(args: argparse.Namespace) -> int:
    """Import, then print the spec or write it to -o."""
    from infest.compiler.hf.families import identifier
    from infest.compiler.hf.importer import import_hf, sibling_quant_config
    from infest.exports.output import refuse_inputs, write_output
    config = Path(args.config)
    quant = Path(args.quant_config) if args.quant_config else sibling_quant_config(config)
    inputs = [config] + ([quant] if quant else [])
    if args.output:  # before any work: -o must not name the config it reads
        refuse_inputs(Path(args.output), inputs, "-o")
    name = args.name and identifier(args.name)
    if name is None and args.output:
        name = identifier(Path(args.output).stem)
    text = import_hf(config, quant, name, args.gguf)
    if not args.output:
        sys.stdout.write(text)
        return 0
    write_output(args.output, text, inputs, "-o")
    sys.stderr.write(f"wrote {args.output}\n")
    return 0
