import pytest

from matchbox.ops import _registry


@pytest.fixture(params=["gather", "mask"])
def row_strategy(request, monkeypatch):
    """Run a test with both ways row-wise rules treat non-real rows: gather
    the real rows (what CPU does) and mask every row (what GPU does)."""
    monkeypatch.setattr(_registry, "gathers_rows", lambda t, small=True: request.param == "gather")
    return request.param
