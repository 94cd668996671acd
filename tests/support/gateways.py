"""LiteLLM for the tests: `make test` installs it into .venv-litellm and sets REPRO_LITELLM.

A run without that variable (pytest by hand) and without a litellm on PATH skips the LiteLLM tests,
saying how to get it; under `make test` a missing LiteLLM fails them (REPRO_LITELLM is set)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

import pytest

from repro.lab.stacks import Proxy, litellm


@contextlib.contextmanager
def litellm_gateway(upstream: str, **options) -> Iterator[Proxy]:
    if not os.environ.get("REPRO_LITELLM") and shutil.which("litellm") is None:
        pytest.skip("LiteLLM not installed: run `make setup-litellm` and set "
                    "REPRO_LITELLM=$PWD/.venv-litellm/bin/litellm (make test does both)")
    with litellm(upstream, **options) as gateway:
        yield gateway
