"""The Python tool that ``examples/tools.toml`` names (``target = "shop_tools:lookup_order"``).

Put this folder on the tool workers' ``PYTHONPATH`` (``PYTHONPATH=examples turnstream worker tools
--tools-config examples/tools.toml``); any importable module works the same way.
"""

from __future__ import annotations

from workers.tools import tool


@tool(timeout_s=3.0, idempotent=True)
def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order's shipping status.

    Args:
        order_id: the order number printed on the receipt, e.g. "A-1042"
    """
    return {"order_id": order_id, "status": "shipped"}
