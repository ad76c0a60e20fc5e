"""Collision-free names for generated variables."""
import ast


class Namer:
    """Hands out fresh names that collide with no name in the function."""

    def __init__(self, tree):
        self.used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        self.used |= {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
        self.used |= {n.name for n in ast.walk(tree)
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}

    def new(self, base):
        name, i = base, 1
        while name in self.used:
            i += 1
            name = f"{base}{i}"
        self.used.add(name)
        return name
