"""The hostile corpus, built once per session for every test module of this folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import make_corpus


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_corpus.build(tmp_path_factory.mktemp("hostile"))
