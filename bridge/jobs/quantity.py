"""Kubernetes resource quantities ("500m", "1.5Gi", "1e9", "129M") as exact decimals.

Kept here rather than taken from ``lightkube.utils.quantity.parse_quantity``: that
one misses the ``n``/``u`` suffixes and upper-case exponents (``1E9``) that the API
server accepts and may hand back, accepts ``Z``/``Y`` that it rejects, and turns
huge exponents into unbounded integers. This follows apimachinery's grammar.
"""

import re
from decimal import ROUND_CEILING, Context, Decimal

# <sign><digits>[.<digits>] then a binary SI suffix, a decimal SI suffix or e/E<exponent>.
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Nothing Kubernetes or Slurm stores goes beyond a signed 64-bit integer.
_LIMIT = Decimal(2**63)
# Rounding up: the bridge must never ask Slurm for less than the pod asked Kubernetes for.
_CONTEXT = Context(prec=60, rounding=ROUND_CEILING)


def parse_quantity(text: str) -> Decimal:
    """Return the value of a quantity in base units (cores, bytes, devices).

    Raises ValueError naming the text when it is not a Kubernetes quantity.
    """
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number = Decimal(match["number"])
    suffix, exponent = match["suffix"], match["exponent"]
    if exponent is not None:
        if len(exponent.lstrip("+-")) > 3:  # a bounded exponent keeps the arithmetic cheap
            raise ValueError(f"quantity out of range: {text!r}")
        value = _CONTEXT.scaleb(number, int(exponent))
    elif suffix in _BINARY:
        value = _CONTEXT.multiply(number, 1024 ** _BINARY[suffix])
    else:
        value = _CONTEXT.scaleb(number, _DECIMAL.get(suffix or "", 0))
    if abs(value) >= _LIMIT:
        raise ValueError(f"quantity out of range: {text!r}")
    return value
