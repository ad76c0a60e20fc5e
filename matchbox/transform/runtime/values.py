"""The values a variable can hold besides a per-example value: not yet
assigned on a path (``Undefined``), or values of different shapes in
different examples (``Mixed``).  Every use of either raises."""
from .select import example_shape


class _Unusable:
    """A value whose every use raises ``self._fail()``."""

    __slots__ = ()

    def _fail(self):
        raise NotImplementedError

    def _use(self, *args, **kwargs):
        self._fail()

    __bool__ = __call__ = __iter__ = __getitem__ = __add__ = __radd__ = __mul__ = _use
    __sub__ = __rsub__ = __truediv__ = __neg__ = __len__ = __index__ = __float__ = _use

    def __getattr__(self, name):
        if name.startswith("__") or name in type(self).__slots__:
            raise AttributeError(name)  # (copy, pickle, torch.compile probe these)
        self._fail()


class Undefined(_Unusable):
    """The value of a variable not yet assigned on this path."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def _fail(self):
        raise NameError(
            f"variable {self.name!r} is used before it is assigned (for some example it "
            f"was assigned only on a path that was not taken)")

    def __repr__(self):
        return f"<undefined {self.name}>"


class Mixed(_Unusable):
    """The value of a variable whose examples hold values of different
    per-example ranks (``topi = topi[:, 0]`` run by some examples only):
    ``parts`` is a list of ``(lanes, value)``, the lanes disjoint and
    covering the batch.  Code running in the lanes of one part reads that
    part's value (``read``); a later assignment in the other lanes makes
    it one value again.  Any other use raises."""

    __slots__ = ("parts",)

    def __init__(self, parts):
        self.parts = parts

    def resolve(self, lanes):
        """The value that every lane of ``lanes`` holds, if one does."""
        if lanes is not None:
            for held, value in self.parts:
                if held is lanes or not bool((lanes & ~held).any()):
                    return value
        self._fail()

    def shapes(self):
        return " and ".join(sorted({example_shape(v) for _, v in self.parts}, key=len))

    def _fail(self):
        raise ValueError(
            f"this value holds per-example shapes {self.shapes()} in different examples (it "
            f"was rebound to another shape by some examples only, in a branch or a loop they "
            f"alone ran). Code that runs for examples of different shapes cannot read it: "
            f"bind the new value to a new name, or give both values the same number of "
            f"dimensions")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        next(v for v in list(args) + list((kwargs or {}).values()) if type(v) is cls)._fail()

    def __repr__(self):
        return "<mixed: " + ", ".join(example_shape(v) for _, v in self.parts) + ">"


def returned(value, lines):
    """The value of a function with several returns (at ``lines``): one
    value for every example, whichever return it took."""
    if type(value) is Mixed:
        raise ValueError(
            f"the examples return values of different per-example shapes ({value.shapes()}) "
            f"from the return statements at lines {', '.join(map(str, lines))}; a batch holds "
            f"one shape per value: make every return give a value with the same number of "
            f"dimensions")
    return value
