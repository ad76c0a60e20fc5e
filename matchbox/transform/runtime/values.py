"""The values a variable can hold besides a per-example value: not yet
assigned on a path (``Undefined``), or values of different shapes in
different examples (``Mixed``)."""
from .select import example_shape


class Undefined:
    """The value of a variable not yet assigned on this path."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def _fail(self, *args, **kwargs):
        raise NameError(
            f"variable {self.name!r} is used before it is assigned (for some example it "
            f"was assigned only on a path that was not taken)")

    __bool__ = __call__ = __iter__ = __getitem__ = __add__ = __radd__ = __mul__ = _fail
    __sub__ = __rsub__ = __truediv__ = __neg__ = __len__ = __index__ = __float__ = _fail

    def __getattr__(self, name):
        if name.startswith("__") or name == "name":  # (copy, pickle, torch.compile probe these)
            raise AttributeError(name)
        self._fail()

    def __repr__(self):
        return f"<undefined {self.name}>"


class Mixed:
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

    def _fail(self, *args, **kwargs):
        shapes = " and ".join(sorted({example_shape(v) for _, v in self.parts}, key=len))
        raise ValueError(
            f"this value holds per-example shapes {shapes} in different examples (it was "
            f"rebound to another shape by some examples only, in a branch or a loop they "
            f"alone ran). Code that runs for examples of different shapes cannot read it: "
            f"bind the new value to a new name, or give both values the same number of "
            f"dimensions")

    __bool__ = __call__ = __iter__ = __getitem__ = __add__ = __radd__ = __mul__ = _fail
    __sub__ = __rsub__ = __truediv__ = __neg__ = __len__ = __index__ = __float__ = _fail

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        next(v for v in list(args) + list((kwargs or {}).values()) if type(v) is cls)._fail()

    def __getattr__(self, name):
        if name.startswith("__") or name == "parts":
            raise AttributeError(name)
        self._fail()

    def __repr__(self):
        return "<mixed: " + ", ".join(example_shape(v) for _, v in self.parts) + ">"


def returned(value, lines):
    """The value of a function with several returns (at ``lines``): one
    value for every example, whichever return it took."""
    if type(value) is Mixed:
        shapes = " and ".join(sorted({example_shape(v) for _, v in value.parts}, key=len))
        raise ValueError(
            f"the examples return values of different per-example shapes ({shapes}) from the "
            f"return statements at lines {', '.join(map(str, lines))}; a batch holds one shape "
            f"per value: make every return give a value with the same number of dimensions")
    return value
