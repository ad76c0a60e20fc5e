"""Random example-level programs: each batched run equals its per-example
runs (values and gradients).  CI runs 500 seeded programs; run more with
``python -m tests.transform.fuzzer --count 5000``."""
import random

import pytest

from .fuzzer import ProgramGenerator, check_program

CHUNKS, PER_CHUNK = 5, 100


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_programs(chunk):
    checked = 0
    for seed in range(chunk * PER_CHUNK, (chunk + 1) * PER_CHUNK):
        src = ProgramGenerator(random.Random(seed)).generate()
        checked += check_program(src, seed, B=4) is True
    assert checked >= PER_CHUNK * 0.7  # most programs are valid plain PyTorch


@pytest.mark.parametrize("chunk", range(2))
def test_random_programs_compacted(chunk):
    """The same programs with every while loop and loop over steps compacted as
    soon as a lane leaves."""
    checked = 0
    for seed in range(chunk * PER_CHUNK, (chunk + 1) * PER_CHUNK):
        src = ProgramGenerator(random.Random(seed)).generate()
        checked += check_program(src, seed, B=4, compact=1.0) is True
    assert checked >= PER_CHUNK * 0.7
