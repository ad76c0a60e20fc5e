"""The execution mask is per thread: one @batch function runs from four
threads at once on different batches, each result equal to its own
per-example runs.  And per async task: a @batch call sets and resets the
mask with no await inside (``await`` is refused in @batch code), so tasks
that interleave between calls never see each other's lanes."""
import asyncio
import threading

import torch

from matchbox import MaskedBatch, batch


@batch
def stepper(x):
    y = x * 1.0
    n = 0
    while y < 3:
        if y > 0:
            y = y * 1.5 + 0.1
        else:
            y = y + 0.8
        n += 1
    return y + n


def reference(x):
    y = x.clone()
    n = 0
    while y < 3:
        y = y * 1.5 + 0.1 if y > 0 else y + 0.8
        n += 1
    return y + n


def test_four_threads():
    errors, barrier = [], threading.Barrier(4)

    def work(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            xs = [torch.randn(1, 1, generator=g, dtype=torch.float64) * 3 for _ in range(5 + seed)]
            barrier.wait()
            for _ in range(5):
                out = stepper(MaskedBatch.fromlist(xs, (False,))).examples()
                for x, o in zip(xs, out):
                    torch.testing.assert_close(o, reference(x))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_interleaved_async_tasks():
    async def work(seed):
        g = torch.Generator().manual_seed(seed)
        xs = [torch.randn(1, 1, generator=g, dtype=torch.float64) * 3 for _ in range(3 + seed)]
        for _ in range(4):
            out = stepper(MaskedBatch.fromlist(xs, (False,))).examples()
            for x, o in zip(xs, out):
                torch.testing.assert_close(o, reference(x))
            await asyncio.sleep(0)  # let the other tasks run between calls

    async def main():
        await asyncio.gather(*(work(s) for s in range(3)))

    asyncio.run(main())
