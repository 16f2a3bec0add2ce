"""CPU tier of the benchmark's timing schedule (bench/bench.py turn_orders): no GPU needed.

median_ms_pair times several functions call by call, and turn_orders gives the order of
their turns in each round. With one fixed order, a build whose long call left the GPU
slower for the next call cost the same neighbour every round (bench/NOTES.md session
18). So each round is a permutation of all the functions, and over a period of the
design every function takes every position equally often and follows every other
function directly, within a round, equally often.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

import pytest

pytest.importorskip("torch")  # (bench.py imports it at module level; nothing here touches a GPU)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import bench  # noqa: E402


def period(n):
    return 2 * n if n % 2 == 1 and n > 1 else n


def adjacent_pairs(orders):
    """(a, b) for each b that takes its turn right after a within a round."""
    return Counter(pair for order in orders for pair in zip(order, order[1:]))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8, 9])
@pytest.mark.parametrize("runs", [1, 7, 15, 30])
def test_each_round_is_a_permutation(n, runs):
    orders = bench.turn_orders(n, runs)
    assert len(orders) == runs
    for order in orders:
        assert sorted(order) == list(range(n))


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8, 9])
def test_a_period_balances_positions_and_neighbours(n):
    orders = bench.turn_orders(n, period(n))
    per = period(n) // n  # times each function takes each position, and follows each other one
    for k in range(n):
        assert Counter(order[k] for order in orders) == {f: per for f in range(n)}, f"position {k}: {orders}"
    pairs = adjacent_pairs(orders)
    assert pairs == {(a, b): per for a in range(n) for b in range(n) if a != b}, orders


@pytest.mark.parametrize("n", [3, 4, 5, 8])
def test_the_schedule_repeats_its_period(n):
    p = period(n)
    orders = bench.turn_orders(n, 3 * p + 1)
    assert orders[p:2 * p] == orders[:p] and orders[3 * p] == orders[0]
    assert len({tuple(o) for o in orders[:p]}) == p  # (no round of a period repeats another)


def test_a_fixed_order_fails_the_balance():
    # (the balance check is not vacuous: the old schedule, one order every round, breaks it)
    n = 4
    pairs = adjacent_pairs([list(range(n))] * n)
    assert pairs != {(a, b): 1 for a in range(n) for b in range(n) if a != b}
