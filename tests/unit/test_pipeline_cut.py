"""The pipeline's cut of a model into stages and GPipe's bubble, without MPI."""
import pytest

from hpcdl import pipeline
from hpcdl.errors import UserError


def test_the_cut_gives_contiguous_stages_of_nearly_equal_layer_counts():
    assert pipeline.cut(3, 2) == [(0, 2), (2, 3)]
    assert pipeline.cut(3, 3) == [(0, 1), (1, 2), (2, 3)]
    assert pipeline.cut(8, 3) == [(0, 3), (3, 6), (6, 8)]
    assert pipeline.cut(5, 1) == [(0, 5)]


def test_more_stages_than_layers_is_refused_naming_both():
    with pytest.raises(UserError, match="--stages 2: the model has 1 layer"):
        pipeline.cut(1, 2)


@pytest.mark.parametrize("k,m,expected", [(2, 4, 1 / 5), (2, 8, 1 / 9), (3, 4, 2 / 6),
                                          (1, 4, 0.0)])
def test_gpipe_bubble(k, m, expected):
    assert pipeline.bubble_theory(k, m) == pytest.approx(expected)
