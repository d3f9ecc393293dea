"""Package discovery for the `infest` namespace (metadata lives in pyproject.toml).

pyproject's package-dir maps `infest.dsl` to `dsl/` and so on; setuptools cannot prefix
discovered packages by itself, so every subpackage below the mapped folders is found here
and named under `infest.` (an explicit list once missed new subpackages under a
non-editable install while the editable one hid it).
"""
from setuptools import find_packages, setup

ROOTS = ("dsl", "compiler", "exports", "specs")


def infest_packages() -> list[str]:
    """`infest.<root>[.<sub>...]` for every package folder under the mapped roots."""
    found = find_packages(include=[f"{r}" for r in ROOTS] + [f"{r}.*" for r in ROOTS])
    return sorted(f"infest.{p}" for p in found)


setup(packages=infest_packages())
