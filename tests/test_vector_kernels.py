"""The vector kernel's products equal numpy's on every shape a decoder hands it: any rows (whole
tiles of 4 and the 1-3 left over), any input width, output widths inside a panel, on its edge and
past it (the zero-padded last panel), with and without a bias; and the kernel refuses arrays it
cannot read as contiguous float32 rows."""
import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pardec_fairseq.decoding import vector_kernels


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 13), depth=st.integers(1, 300), columns=st.sampled_from([1, 17, 63, 64, 65, 128, 200, 777]),
       with_bias=st.booleans(), seed=st.integers(0, 10_000))
def test_products_equal_numpy(rows, depth, columns, with_bias, seed):
    generator = np.random.default_rng(seed)
    x = generator.standard_normal((rows, depth), dtype=np.float32)
    weight = generator.standard_normal((depth, columns), dtype=np.float32)
    bias = generator.standard_normal(columns, dtype=np.float32) if with_bias else None
    out = vector_kernels.product(x, vector_kernels.pack(weight), vector_kernels.pack_bias(bias, columns), columns)
    expected = x @ weight + (0 if bias is None else bias)
    assert out.shape == (rows, columns)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * depth ** 0.5)


def test_the_packed_weight_holds_whole_panels():
    weight = np.arange(3 * 70, dtype=np.float32).reshape(3, 70)
    panels = vector_kernels.pack(weight)
    assert panels.shape == (2, 3, vector_kernels.PANEL)
    np.testing.assert_array_equal(panels[1, :, :6], weight[:, 64:])
    assert not panels[1, :, 6:].any()


@pytest.mark.parametrize("x", [np.ones((4, 8), dtype=np.float32)[:, ::2], np.ones((2, 4), dtype=np.float64)])
def test_the_kernel_refuses_strided_or_double_rows(x):
    weight = np.ones((4, 64), dtype=np.float32)
    with pytest.raises(numba.core.errors.TypingError):
        vector_kernels.product(x, vector_kernels.pack(weight), vector_kernels.pack_bias(None, 64), 64)


@pytest.mark.parametrize("rows, depth, columns", [(1, 256, 1024), (5, 256, 777), (13, 300, 200)])
def test_large_products_share_their_panels_among_threads_to_the_same_numbers(rows, depth, columns):
    assert rows * depth * columns >= vector_kernels.PARALLEL_WORK
    generator = np.random.default_rng(rows)
    x = generator.standard_normal((rows, depth), dtype=np.float32)
    weight = generator.standard_normal((depth, columns), dtype=np.float32)
    panels, bias = vector_kernels.pack(weight), vector_kernels.pack_bias(None, columns)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        alone = vector_kernels.product(x, panels, bias, columns)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        shared = vector_kernels.product(x, panels, bias, columns)
    finally:
        numba.set_num_threads(threads)
    np.testing.assert_array_equal(alone, shared)
    np.testing.assert_allclose(alone, x @ weight, rtol=1e-4, atol=1e-4 * depth ** 0.5)
