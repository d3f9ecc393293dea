"""The language's meaning: symbols, result keys, dtypes, op kinds and their costs, and elaboration of a model's AST into the op graph."""
