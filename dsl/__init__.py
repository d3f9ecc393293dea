"""The language: .arch text -> a checked AST of frozen dataclasses with source spans; units, error messages, human-readable numbers."""
