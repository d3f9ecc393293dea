"""The compiler: AST -> op graph (core) -> passes -> closed forms (forms) -> numbers (backend) -> analyses; import-hf (hf); the facade is compiler/api.py."""
