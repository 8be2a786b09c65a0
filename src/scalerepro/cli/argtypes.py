"""Argument types that name the flag in their errors: whole numbers from a minimum, finite numbers (above zero),
lists."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from scalerepro.errors import UserError


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number at least ``minimum`` (argparse names the flag in its error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text}: give a whole number of at least {minimum}")
        return value

    return parse


def finite(text: str) -> float:
    """An argparse type: a finite number (float() reads 'nan', 'inf' and 'infinity' too; they are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number; NaN and infinity are refused")
    return value


def positive(text: str) -> float:
    """An argparse type: a finite number above zero."""
    value = finite(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number above 0")
    return value


def int_list(text: str, flag: str) -> tuple[int, ...]:
    """'1,2' -> (1, 2), with an error naming the flag."""
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UserError(f"{flag} {text}: give comma-separated integers, e.g. 1,2") from None
    if any(v < 0 for v in values):
        raise UserError(f"{flag} {text}: counts must be >= 0")
    return values
