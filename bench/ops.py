"""Per-op overhead: microseconds per call, plain Tensor vs MaskedBatch.

    python -m bench ops [--batch-size 4] [--number 2000] [--out bench/results]

For each op, one call on:

- ``tensor``: the plain padded Tensor ``(B, n, d)`` (what hand-written code runs);
- ``static``: a MaskedBatch of B examples ``(1, n, d)``, every dim static;
- ``dynamic``: the same with dim 1 dynamic (examples of lengths 1..n);
- ``dormant``: the dynamic batch inside ``@batch`` control flow with half
  the lanes dormant (the active-lanes state set as a branch sets it).

and the ratio of each to ``tensor``.  Inputs require grad, as in training
(every call records its autograd graph).  ``floor`` is what ``__torch_function__``
dispatch alone costs: ``torch.tanh`` (an op torch implements in C++) and
``F.softmax`` (a Python function of torch's, whose dispatch runs in Python)
on an object whose handler returns at once.
Timings are the best of several runs of ``number`` calls, in one process, one
torch thread, counting the CPU time of the process (not the time other
processes take the core); the kinds of one op run in turn, run after run, so
that a drift of the machine's speed hits them alike.
"""
import argparse
import json
import os
import time
import timeit

import torch
import torch.nn as nn

import torch.nn.functional as TF

import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox._lanes import lanes
from matchbox.transform.runtime import function_runtime

rt = function_runtime()  # the runtime as a rewritten function calls it (its _mb)


class _Floor:
    """The cheapest possible ``__torch_function__`` participant."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return None


def _inputs(B, n, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(1, n, d, generator=g).requires_grad_() for _ in range(B)]
    dyn = [torch.randn(1, 1 + k * (n - 1) // max(1, B - 1), d, generator=g).requires_grad_()
           for k in range(B)]
    return {"tensor": torch.cat(xs), "static": MaskedBatch.fromlist(xs, (False, False)),
            "dynamic": MaskedBatch.fromlist(dyn, (True, False))}


def _ops(d):
    linear, cell = nn.Linear(d, d), nn.LSTMCell(d, d)
    return {
        "add": lambda x: x + x,
        "mul": lambda x: x * x,
        "tanh": torch.tanh,
        "where": lambda x: torch.where(x > 0, x, 0.0),
        "linear": linear,
        "sum over dim 1": lambda x: x.sum(1),
        "softmax over dim 1": lambda x: F.softmax(x, 1),
        "LSTMCell": lambda x: cell(x[:, 0]),
        "x[:, i]": lambda x: x[:, 0],
        "@batch read + assign": lambda x: rt.assign(x, rt.read(x) * 2),
    }


def _time(fn, x, number, lanes_=None):
    """Microseconds per call of ``fn(x)`` (with ``lanes_`` active), one run."""
    with lanes(lanes_):
        return timeit.timeit(lambda: fn(x), number=number, timer=time.process_time) / number * 1e6


def measure(B=4, n=8, d=16, number=2000, repeat=5):
    """``[{op, kind, us, ratio}]`` for every op and kind."""
    xs, ops = _inputs(B, n, d), _ops(d)
    dormant = torch.arange(B) % 2 == 0
    cases = {"tensor": (xs["tensor"], None), "static": (xs["static"], None),
             "dynamic": (xs["dynamic"], None), "dormant": (xs["dynamic"], dormant)}
    rows = []
    for op, fn in (("torch.tanh", torch.tanh), ("F.softmax", lambda x: TF.softmax(x, 1))):
        us = min(_time(fn, _Floor(), number) for _ in range(repeat))
        rows.append({"op": f"__torch_function__ floor ({op})", "kind": "floor", "us": us,
                     "ratio": None})
    for name, fn in ops.items():
        for x, active in cases.values():
            _time(fn, x, 1, active)  # warm up (rule caches, allocator)
        runs = [[_time(fn, x, number, active) for x, active in cases.values()]
                for _ in range(repeat)]  # the kinds in turn, run after run
        us = dict(zip(cases, map(min, zip(*runs))))
        for kind in cases:
            rows.append({"op": name, "kind": kind, "us": us[kind], "ratio": us[kind] / us["tensor"]})
    return rows


def table(rows):
    kinds = ["tensor", "static", "dynamic", "dormant"]
    by = {(r["op"], r["kind"]): r for r in rows}
    floors = {r["op"]: r["us"] for r in rows if r["kind"] == "floor"}
    out = ["| op | " + " | ".join(f"{k} (µs)" for k in kinds) + " | static / tensor | "
           "dynamic / tensor | dormant / tensor |", "|---" * (len(kinds) + 4) + "|"]
    for op in dict.fromkeys(r["op"] for r in rows if r["kind"] != "floor"):
        us = [f"{by[op, k]['us']:.1f}" for k in kinds]
        ratios = [f"{by[op, k]['ratio']:.2f}" for k in kinds[1:]]
        out.append(f"| {op} | " + " | ".join(us + ratios) + " |")
    out.append("\n`__torch_function__` dispatch alone (the floor of any MaskedBatch op), per "
               "call: " + ", ".join(f"{us:.1f} µs from {op.split('(')[1][:-1]}"
                                    for op, us in floors.items())
               + " (x.op() methods skip it).")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--number", type=int, default=2000, help="calls per timing run")
    p.add_argument("--out", default=os.path.join("bench", "results"))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = measure(B=args.batch_size, number=args.number)
    md = table(rows)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ops.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(dict(r, batch_size=args.batch_size, torch=torch.__version__)) + "\n")
    with open(os.path.join(args.out, "ops.md"), "w") as f:
        f.write(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
