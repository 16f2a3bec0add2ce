"""pytest configuration of the Python package's tiers (test/python).

The GPU tier: tests marked `gpu` (or asking for the `gpu` fixture) run only
when PyTorch is installed, torch.cuda.is_available() and
flashgen.gpu_available() are all true; otherwise they are skipped, and pytest
reports them as skipped with the reason (run with -rs, as run.sh does).

Random inputs: every test gets fresh ones from a per-run base seed (printed in
the header; FLASHGEN_TEST_SEED=<n> repeats a run) mixed with the test's id, so
a failure names the seed that reproduces it.
"""

from __future__ import annotations

import functools
import os
import random
import zlib

import pytest

_BASE_SEED = int(os.environ.get("FLASHGEN_TEST_SEED", "0") or 0) or random.SystemRandom().randrange(1, 2**31)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped, and reported as skipped, without one)")


def pytest_report_header(config):
    reason = gpu_skip_reason()
    return [f"flashgen tests: base seed {_BASE_SEED} (FLASHGEN_TEST_SEED={_BASE_SEED} repeats this run)",
            "flashgen GPU tier: " + ("runs" if reason is None else f"skipped ({reason})")]


@functools.lru_cache(maxsize=None)
def gpu_skip_reason():
    """None when the GPU tier can run here, else why not (the skip reason)."""
    try:
        import torch
    except ImportError as e:
        return f"PyTorch is not installed ({e}); the GPU tier drives the GPU through torch"
    try:
        cuda = torch.cuda.is_available()
    except Exception as e:  # pragma: no cover - a broken CUDA install
        return f"torch.cuda.is_available() raised {type(e).__name__}: {e}"
    if not cuda:
        return "torch.cuda.is_available() is False (no CUDA GPU or driver visible to PyTorch)"
    try:
        import flashgen
    except Exception as e:  # the CPU tier's collection reports it as an error
        return f"flashgen does not import ({type(e).__name__}: {e})"
    if not flashgen.gpu_available():
        return "flashgen.gpu_available() is False (libflashgen cannot load libcuda or sees no device)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            reason = reason or gpu_skip_reason()
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=f"GPU tier: {reason}"))


@pytest.fixture
def gpu():
    """Skips the test (with the reason) unless the GPU tier can run; returns the torch module."""
    reason = gpu_skip_reason()
    if reason is not None:
        pytest.skip(f"GPU tier: {reason}")
    import torch
    return torch


@pytest.fixture
def seed(request):
    """This test's seed: the run's base seed mixed with the test's id (stable across reruns with
    FLASHGEN_TEST_SEED). Seeds Python's `random` and, when present, torch's generators."""
    s = (_BASE_SEED ^ zlib.crc32(request.node.nodeid.encode())) & 0x7FFFFFFF
    random.seed(s)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.manual_seed(s)  # (all devices)
    request.node.user_properties.append(("seed", s))
    return s


def pytest_runtest_makereport(item, call):
    # A failing test's report names its seed.
    if call.excinfo is not None and call.when == "call":
        for name, value in item.user_properties:
            if name == "seed":
                item.add_report_section("call", "seed",
                                        f"test seed {value} (base seed {_BASE_SEED}; rerun with "
                                        f"FLASHGEN_TEST_SEED={_BASE_SEED})")
