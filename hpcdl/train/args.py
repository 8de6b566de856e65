"""Argument types of ``hpcdl train``'s options: each parses one value or says what it expected."""
from __future__ import annotations

import argparse
import math

TARGET_METRICS = {"accuracy": "test_accuracy", "loss": "test_loss"}   # accuracy >=, loss <=


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got '{text}'")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def target(text: str):
    """``METRIC:VALUE`` of ``--target``: accuracy reached at or above VALUE, loss at or below."""
    metric, _, value = text.partition(":")
    if metric not in TARGET_METRICS or not value:
        raise argparse.ArgumentTypeError(f"expected accuracy:VALUE or loss:VALUE, got '{text}'")
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number after '{metric}:', got '{value}'")
    if math.isnan(v) or math.isinf(v):
        raise argparse.ArgumentTypeError(f"the target must be a finite number, got {value}")
    return metric, v


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got '{text}'")
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def slow_rank(text: str):
    """``--slow-rank R:FACTOR``: rank R computes FACTOR (>= 1) times as long; ``R:Dms``: rank R
    spends D more milliseconds per step. (rank, factor or None, seconds or None)."""
    rank, _, value = text.partition(":")
    ms = value.endswith("ms")
    try:
        r, f = int(rank), float(value[:-2] if ms else value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected RANK:FACTOR or RANK:MSms such as 1:2 or "
                                         f"1:3ms, got '{text}'")
    if r < 0 or math.isinf(f) or not (f >= 0 if ms else f >= 1):
        raise argparse.ArgumentTypeError(f"expected a rank >= 0 and a factor >= 1 or a delay "
                                         f">= 0 ms, got '{text}'")
    return (r, None, f / 1e3) if ms else (r, f, None)
