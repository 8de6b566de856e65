"""The pipeline's cut of a model into stages and GPipe's bubble, without MPI."""
import pytest

from hpcdl.train import stages
from hpcdl.errors import UserError


def test_the_cut_gives_contiguous_stages_of_nearly_equal_layer_counts():
    assert stages.cut(3, 2) == [(0, 2), (2, 3)]
    assert stages.cut(3, 3) == [(0, 1), (1, 2), (2, 3)]
    assert stages.cut(8, 3) == [(0, 3), (3, 6), (6, 8)]
    assert stages.cut(5, 1) == [(0, 5)]


def test_more_stages_than_layers_is_refused_naming_both():
    with pytest.raises(UserError, match="--stages 2: the model has 1 layer"):
        stages.cut(1, 2)


@pytest.mark.parametrize("k,m,expected", [(2, 4, 1 / 5), (2, 8, 1 / 9), (3, 4, 2 / 6),
                                          (1, 4, 0.0)])
def test_gpipe_bubble(k, m, expected):
    assert stages.bubble_theory(k, m) == pytest.approx(expected)


def test_the_balanced_cut_minimises_the_slowest_stage():
    # four layers; a stage's cost is the sum of its layers' (3, 1, 1, 3) here
    layer = [3.0, 1.0, 1.0, 3.0]
    n = len(layer)
    costs = {(a, b): sum(layer[a:b]) for a in range(n) for b in range(a + 1, n + 1)
             if stages._can_be_stage(a, b, n, 2)}
    assert stages.balanced_cut(costs, n, 2) == [(0, 2), (2, 4)]
    costs3 = {(a, b): sum(layer[a:b]) for a in range(n) for b in range(a + 1, n + 1)
              if stages._can_be_stage(a, b, n, 3)}
    assert stages.balanced_cut(costs3, n, 3) == [(0, 1), (1, 3), (3, 4)]


def test_only_the_stages_a_cut_can_make_are_timed():
    n = 4
    two = {(a, b) for a in range(n) for b in range(a + 1, n + 1)
           if stages._can_be_stage(a, b, n, 2)}
    assert two == {(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4)}
    assert not stages._can_be_stage(1, 3, 4, 2)          # a middle run needs a middle stage
    assert stages._can_be_stage(1, 3, 4, 3) and not stages._can_be_stage(0, 4, 4, 2)


def test_the_bubble_of_unequal_stages_exceeds_gpipes_and_equals_it_when_equal():
    assert stages.bubble_expected([1.0, 1.0], 4) == pytest.approx(stages.bubble_theory(2, 4))
    # stages of 1 and 2: a step of 3 x 2 + 3 = 9; idle 1 - 4/9 and 1 - 8/9
    assert stages.bubble_expected([1.0, 2.0], 4) == pytest.approx(((5 / 9) + (1 / 9)) / 2)
