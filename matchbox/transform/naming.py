"""Collision-free names for generated variables."""
import gast


class Namer:
    """Hands out fresh names that collide with no name in the function
    (gast writes parameters and ``except ... as`` names as ``Name`` nodes)."""

    def __init__(self, tree):
        self.used = {n.id for n in gast.walk(tree) if isinstance(n, gast.Name)}
        self.used |= {n.name for n in gast.walk(tree)
                      if isinstance(n, (gast.FunctionDef, gast.AsyncFunctionDef, gast.ClassDef))}
        self.generated = set()   # (the names new() handed out: the rewrite's own variables)

    def new(self, base):
        name, i = base, 1
        while name in self.used:
            i += 1
            name = f"{base}{i}"
        self.used.add(name)
        self.generated.add(name)
        return name
