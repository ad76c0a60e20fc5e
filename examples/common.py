"""What every example script shares: a progress bar, a training loop and a
command line.

No third-party progress library: the bar is a dozen lines and the examples
stay runnable with nothing but torch installed.
"""
import argparse
import sys
import time

import torch


def run_main(main, doc, **defaults):
    """Call ``main`` with ``--name value`` options for its keyword
    ``defaults`` (``None`` defaults take strings, e.g. ``--device cuda``),
    after setting ``--threads`` torch CPU threads (default 1: these small
    ops lose time to thread hand-offs, badly so on a busy machine)."""
    p = argparse.ArgumentParser(description=doc.strip().split("\n")[0])
    for name, value in defaults.items():
        p.add_argument("--" + name.replace("_", "-"), default=value,
                       type=str if value is None else type(value))
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = vars(p.parse_args())
    torch.set_num_threads(args.pop("threads"))
    return main(**args)


def train_loop(opt, items, loss_of, after_step=None):
    """One optimizer step per item of ``items``: ``loss_of(item)``, backward,
    ``opt.step()`` (then ``after_step()``, e.g. a learning-rate schedule),
    under a progress bar showing the loss.  Returns (losses, seconds)."""
    losses, start = [], time.perf_counter()
    bar = progress(items, "train")
    for item in bar:
        loss = loss_of(item)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if after_step is not None:
            after_step()
        losses.append(loss.item())
        bar.note(f"loss {losses[-1]:.3f}")
    return losses, time.perf_counter() - start


def progress(iterable, desc="", total=None, every=0.1):
    """Yield from `iterable`, drawing `desc [#####.....] i/n  secs  note` on
    stderr; `bar.note(text)` sets the note (e.g. the current loss)."""
    return _Bar(iterable, desc, total, every)


class _Bar:
    def __init__(self, iterable, desc, total, every):
        self.iterable, self.desc, self.every = iterable, desc, every
        self.total = total if total is not None else len(iterable)
        self.text, self._last, self._start = "", 0.0, time.perf_counter()

    def note(self, text):
        """Show `text` (e.g. the current loss) after the bar."""
        self.text = text

    def __iter__(self):
        for i, item in enumerate(self.iterable):
            yield item
            self._draw(i + 1)
        self._draw(self.total, force=True)
        sys.stderr.write("\n")

    def _draw(self, done, force=False):
        now = time.perf_counter()
        if not force and now - self._last < self.every:
            return
        self._last = now
        width = 30
        filled = width * done // max(self.total, 1)
        sys.stderr.write(f"\r{self.desc} [{'#' * filled}{'.' * (width - filled)}] "
                         f"{done}/{self.total} {now - self._start:5.1f}s {self.text}")
        sys.stderr.flush()
