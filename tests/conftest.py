"""Shared pytest fixtures."""

from __future__ import annotations

import os

import pytest

from libreoffice import find_soffice


@pytest.fixture(scope="session")
def soffice() -> str:
    """Path of LibreOffice's soffice; skip without it, but fail under CI.

    CI must really recalculate workbooks, so a missing LibreOffice there is an
    error rather than a silently skipped test.
    """
    path = find_soffice()
    if path is not None:
        return path
    reason = ("LibreOffice (soffice) not found: install libreoffice-calc "
              "to run the workbook recalculation tests")
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(f"{reason} (required because CI is set)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every test (and every subprocess it starts) caches into a fresh folder, never
    the user's ~/.cache/infest."""
    os.environ["INFEST_CACHE_DIR"] = str(tmp_path_factory.mktemp("infest-cache"))
