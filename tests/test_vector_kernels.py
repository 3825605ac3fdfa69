"""The vector kernel's products equal numpy's on every shape a decoder hands it: any rows (whole
tiles and the rows left over) and every tile geometry, any input width, output widths inside a
panel, on its edge and past it (the zero-padded last panel), with and without a bias; and the
kernel refuses arrays it cannot read as contiguous float32 rows. Packed in bfloat16, the products
are those of the operands rounded to bfloat16 (ties to even), accumulated in float32; packed in
int8, those of the weight rounded per column; packed in bytes, those of the rows rounded to bytes and
the weight to 63 levels a side, exactly summed (and never saturated) in integers."""
import numba
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pardec_fairseq.decoding import vector_kernels


def random_operands(seed, rows, depth, columns, with_bias):
    """Rows ``x``, a weight and a bias (or ``None``) of standard normal floats."""
    generator = np.random.default_rng(seed)
    x = generator.standard_normal((rows, depth), dtype=np.float32)
    weight = generator.standard_normal((depth, columns), dtype=np.float32)
    return x, weight, generator.standard_normal(columns, dtype=np.float32) if with_bias else None


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 13), depth=st.integers(1, 300), columns=st.sampled_from([1, 17, 63, 64, 65, 128, 200, 777]),
       with_bias=st.booleans(), seed=st.integers(0, 10_000))
def test_products_equal_numpy(rows, depth, columns, with_bias, seed):
    x, weight, bias = random_operands(seed, rows, depth, columns, with_bias)
    out = vector_kernels.product(x, vector_kernels.pack(weight), vector_kernels.pack_bias(bias, columns), columns)
    expected = x @ weight + (0 if bias is None else bias)
    assert out.shape == (rows, columns)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * depth ** 0.5)


def _tiles_of(rows, columns, lanes, byte_dot=None):
    """A product of whole panels through tiles of ``rows`` rows, ``columns`` panel columns and vectors
    of ``lanes`` floats (byte tiles through VNNI's dot product or not): the geometries another CPU's
    kernel may choose."""
    tile = vector_kernels._tile(rows, columns, lanes, byte_dot)

    @numba.njit
    def product(x, panels, bias):
        out = np.empty((x.shape[0], panels.shape[0] * vector_kernels.PANEL), dtype=np.float32)
        for p in range(panels.shape[0]):
            for q in range(0, vector_kernels.PANEL, columns):
                tile(x, 0, panels, p, q, bias, out, 0, p * vector_kernels.PANEL)
        return out

    return product


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("columns, lanes, stripe", [(16, 8, 16), (32, 8, 16), (64, 8, 16), (64, 16, 16),
                                                    (16, 8, 64), (64, 16, 64)])
def test_every_tile_geometry_computes_the_product(rows, columns, lanes, stripe):
    """AVX2's geometries (8-float vectors, 16 or 32 columns of 16-column stripes for several rows,
    whole panels for one) and AVX-512's (16-float vectors, 64 columns, one stripe per panel), and a
    narrow tile within a wide stripe (as attention's value products run), on whichever CPU runs it."""
    x, weight, bias = random_operands(rows * columns, rows, 37, 128, True)
    panels = vector_kernels.pack(weight, stripe)
    out = _tiles_of(rows, columns, lanes)(x, panels, vector_kernels.pack_bias(bias, 128))
    np.testing.assert_allclose(out, x @ weight + bias, rtol=1e-4, atol=1e-4 * 37 ** 0.5)


@pytest.mark.parametrize("stripe", [16, 64])
def test_the_packed_weight_holds_whole_panels_in_stripes(stripe):
    weight = np.arange(3 * 70, dtype=np.float32).reshape(3, 70)
    panels = vector_kernels.pack(weight, stripe)
    assert panels.shape == (2, 64 // stripe, 3, stripe)
    np.testing.assert_array_equal(panels[0].transpose(1, 0, 2).reshape(3, 64), weight[:, :64])
    np.testing.assert_array_equal(panels[1, 0, :, :6], weight[:, 64:])
    assert not panels[1, 0, :, 6:].any() and not panels[1, 1:].any()


@pytest.mark.parametrize("x", [np.ones((4, 8), dtype=np.float32)[:, ::2], np.ones((2, 4), dtype=np.float64)])
def test_the_kernel_refuses_strided_or_double_rows(x):
    weight = np.ones((4, 64), dtype=np.float32)
    with pytest.raises(numba.core.errors.TypingError):
        vector_kernels.product(x, vector_kernels.pack(weight), vector_kernels.pack_bias(None, 64), 64)


@pytest.mark.parametrize("rows, depth, columns, in_bytes", [(1, 256, 1024, False), (5, 256, 777, False),
                                                        (13, 300, 200, False), (1, 256, 4096, True),
                                                        (3, 400, 1000, True)])
def test_large_products_share_their_panels_among_threads_to_the_same_numbers(rows, depth, columns, in_bytes):
    if in_bytes and not vector_kernels.has_byte_products():
        pytest.skip("this CPU has no byte products")
    assert rows * depth * columns >= (vector_kernels.PARALLEL_BYTE_WORK if in_bytes else vector_kernels.PARALLEL_WORK)
    generator = np.random.default_rng(rows)
    x = generator.standard_normal((rows, depth), dtype=np.float32)
    weight = generator.standard_normal((depth, columns), dtype=np.float32)
    panels, bias = vector_kernels.pack_bytes(weight) if in_bytes else \
        (vector_kernels.pack(weight), vector_kernels.pack_bias(None, columns))
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        alone = vector_kernels.product(x, panels, bias, columns)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        shared = vector_kernels.product(x, panels, bias, columns)
    finally:
        numba.set_num_threads(threads)
    np.testing.assert_array_equal(alone, shared)
    if in_bytes:
        values, scales = vector_kernels.int8_columns(weight, vector_kernels.BYTE_WEIGHT_LARGEST)
        weight = values.astype(np.float64) * scales
        x = rounded_rows(x)
    np.testing.assert_allclose(alone, x @ weight, rtol=1e-4, atol=1e-4 * depth ** 0.5)


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(2, 16), depth=st.integers(1, 300), columns=st.sampled_from([17, 64, 200, 1024]),
       seed=st.integers(0, 10_000))
def test_a_rows_product_does_not_depend_on_the_tile_it_falls_in(rows, depth, columns, seed):
    """Each row's numbers are the same bits alone as among others (whichever tile and thread take it):
    a sentence's output cannot depend on its batch or on the length of its draft."""
    x, weight, bias = random_operands(seed, rows, depth, columns, True)
    panels, packed_bias = vector_kernels.pack(weight), vector_kernels.pack_bias(bias, columns)
    together = vector_kernels.product(x, panels, packed_bias, columns)
    for r in range(rows):
        alone = vector_kernels.product(x[r:r + 1], panels, packed_bias, columns)
        np.testing.assert_array_equal(alone, together[r:r + 1])


needs_bfloat16_dot = pytest.mark.skipif(not vector_kernels.has_bfloat16_dot(),
                                        reason="the CPU has no AVX-512 bfloat16 dot product")


def as_bfloat16(a: np.ndarray) -> np.ndarray:
    """``a`` rounded to bfloat16, in float64."""
    return (vector_kernels.bfloat16_bits(np.ascontiguousarray(a, dtype=np.float32)).astype(np.uint32) << 16) \
        .view(np.float32).astype(np.float64)


def test_bfloat16_rounds_to_nearest_ties_to_even():
    one_ulp = 2.0 ** -7  # bfloat16 keeps 7 fraction bits
    x = np.array([1.0, 1.0 + one_ulp / 2, 1.0 + 3 * one_ulp / 2, 1.0 + one_ulp / 4, -2.0 - 0.75 * 2 * one_ulp],
                 dtype=np.float32)
    expected = [1.0, 1.0, 1.0 + 2 * one_ulp, 1.0, -2.0 - 2 * one_ulp]
    assert as_bfloat16(x).tolist() == expected
    pairs = vector_kernels.bfloat16_pairs(np.array([[1.0, -2.0, 0.5]], dtype=np.float32)).view(np.uint32)
    assert pairs.tolist() == [[0x3F80 | 0xC000 << 16, 0x3F00]]


bfloat16_operands = dict(rows=st.integers(1, 13), depth=st.integers(1, 300),
                         columns=st.sampled_from([1, 17, 64, 65, 200, 1024]), with_bias=st.booleans(),
                         seed=st.integers(0, 10_000))


@needs_bfloat16_dot
@settings(max_examples=60, deadline=None)
@given(**bfloat16_operands)
def test_bfloat16_pair_products_are_those_of_the_rounded_operands(rows, depth, columns, with_bias, seed):
    x, weight, bias = random_operands(seed, rows, depth, columns, with_bias)
    panels = vector_kernels.pack_bfloat16_pairs(weight)
    assert panels.dtype == np.int32 and panels.shape == (-(-columns // 64), 1, (depth + 1) // 2, 64)
    out = vector_kernels.product(x, panels, vector_kernels.pack_bias(bias, columns), columns)
    expected = as_bfloat16(x) @ as_bfloat16(weight) + (0 if bias is None else bias)
    assert out.shape == (rows, columns)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * depth ** 0.5)


@settings(max_examples=60, deadline=None)
@given(**bfloat16_operands)
def test_widened_bfloat16_products_are_those_of_the_rounded_weight(rows, depth, columns, with_bias, seed):
    """On any CPU: the rows stay float32, the weight is read as bfloat16 and widened in registers."""
    x, weight, bias = random_operands(seed, rows, depth, columns, with_bias)
    panels = vector_kernels.pack_bfloat16_values(weight)
    assert panels.dtype == np.uint16 and panels.shape == vector_kernels.pack(weight).shape
    out = vector_kernels.product(x, panels, vector_kernels.pack_bias(bias, columns), columns)
    expected = x.astype(np.float64) @ as_bfloat16(weight) + (0 if bias is None else bias)
    assert out.shape == (rows, columns)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * depth ** 0.5)


@settings(max_examples=60, deadline=None)
@given(**bfloat16_operands)
def test_int8_products_are_those_of_the_rounded_weight(rows, depth, columns, with_bias, seed):
    """The weight read as int8 per column, converted in registers, the sums scaled, then biased."""
    x, weight, bias = random_operands(seed, rows, depth, columns, with_bias)
    panels, bias_and_scales = vector_kernels.pack_int8(weight, bias)
    assert panels.dtype == np.int8 and panels.shape == vector_kernels.pack(weight).shape
    out = vector_kernels.product(x, panels, bias_and_scales, columns)
    values, scales = vector_kernels.int8_columns(weight)
    expected = x.astype(np.float64) @ (values.astype(np.float64) * scales) + (0 if bias is None else bias)
    assert out.shape == (rows, columns)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * depth ** 0.5)


def test_int8_rounding_keeps_each_column_within_half_a_step():
    weight = np.array([[0.5, 0.0, -3.0], [-1.0, 0.0, 2.0], [0.25, 0.0, 1.0]], dtype=np.float32)
    values, scales = vector_kernels.int8_columns(weight)
    assert values.dtype == np.int8 and np.abs(values).max(axis=0).tolist() == [127, 0, 127]
    assert scales.tolist() == pytest.approx([1.0 / 127, 1.0, 3.0 / 127])  # an all-zero column keeps scale 1
    assert np.all(np.abs(values * scales - weight) <= scales / 2 + 1e-7)


@pytest.mark.parametrize("dot", [True, False])
def test_bfloat16_packing_follows_the_cpu(monkeypatch, dot):
    monkeypatch.setattr(vector_kernels, "has_bfloat16_dot", lambda: dot)
    weight = np.ones((3, 5), dtype=np.float32)
    assert vector_kernels.pack_bfloat16(weight).dtype == (np.int32 if dot else np.uint16)


needs_byte_products = pytest.mark.skipif(not vector_kernels.has_byte_products(),
                                         reason="the CPU has no AVX2 (or AVX-512BW) byte multiply-adds")


def rounded_rows(x: np.ndarray) -> np.ndarray:
    """``x``'s rows rounded as ``byte_quads`` rounds them (127 levels either side of zero), in float64."""
    scales = np.abs(x).max(axis=1, keepdims=True) / np.float32(127)
    scales = np.where(scales > 0, scales, np.float32(1)).astype(np.float32)
    return np.rint(x * (np.float32(1) / scales)).astype(np.float64) * scales


def test_byte_quads_round_each_row_to_bytes_four_to_a_word():
    x = np.array([[1.0, -0.5, 0.25, 0.0, 2.0], [0.0, 0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    quads, scales = vector_kernels.byte_quads(x)
    assert quads.dtype == np.uint32 and quads.shape == (2, 2)  # 5 bytes padded to 8
    assert scales.tolist() == pytest.approx([2.0 / 127, 1.0])  # an all-zero row keeps scale 1
    octets = quads.view(np.uint8).reshape(2, 8)
    assert octets[0].tolist() == [128 + 64, 128 - 32, 128 + 16, 128, 255, 0, 0, 0]
    assert octets[1].tolist() == [128] * 5 + [0] * 3


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 3), depth=st.integers(1, 70), seed=st.integers(0, 2 ** 31 - 1))
def test_byte_quads_scale_each_row_by_its_largest_magnitude(rows, depth, seed):
    """Whichever of the 16 running maxima the largest magnitude falls in, the scale is numpy's."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, depth)) * rng.uniform(1e-3, 1e3)).astype(np.float32)
    quads, scales = vector_kernels.byte_quads(x)
    assert scales.tolist() == (np.abs(x).max(axis=1) / np.float32(127)).tolist()
    octets = quads.view(np.uint8).reshape(rows, -1)[:, :depth].astype(np.float64) - 128
    assert np.array_equal(octets * scales[:, None].astype(np.float64), rounded_rows(x))


@needs_byte_products
@settings(max_examples=60, deadline=None)
@given(**bfloat16_operands)
def test_byte_products_are_those_of_the_rounded_rows_and_weight(rows, depth, columns, with_bias, seed):
    """Rows rounded to bytes, the weight to 63 levels a side per column, summed exactly in integers,
    then scaled and biased."""
    x, weight, bias = random_operands(seed, rows, depth, columns, with_bias)
    panels, bias_scales_corrections = vector_kernels.pack_bytes(weight, bias)
    assert panels.dtype == np.uint32 and panels.shape[:2] == vector_kernels.pack(weight).shape[:2]
    out = vector_kernels.product(x, panels, bias_scales_corrections, columns)
    values, scales = vector_kernels.int8_columns(weight, vector_kernels.BYTE_WEIGHT_LARGEST)
    expected = rounded_rows(x) @ (values.astype(np.float64) * scales) + (0 if bias is None else bias)
    assert out.shape == (rows, columns)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * depth ** 0.5)


@needs_byte_products
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_byte_products_do_not_saturate_at_the_extremes(sign):
    """Every row byte at 255 (or 1) against every weight at +-63: the largest sums of byte pairs."""
    depth, columns = 1024, 70
    x = np.full((3, depth), sign, dtype=np.float32)
    weight = np.where(np.arange(columns) % 2 == 0, 1.0, -1.0).astype(np.float32) * np.ones((depth, 1), np.float32)
    panels, bias = vector_kernels.pack_bytes(weight)
    out = vector_kernels.product(x, panels, bias, columns)
    np.testing.assert_allclose(out, x @ weight, rtol=1e-6)


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("columns, lanes, stripe, dot", [(16, 8, 16, False), (32, 8, 16, False), (64, 8, 16, False),
                                                         (64, 16, 64, False), (64, 16, 64, True)])
def test_every_byte_tile_geometry_computes_the_product(rows, columns, lanes, stripe, dot):
    """AVX2's byte tiles (8 lanes of 4 bytes) over 16-column stripes, as ``_tiles_of`` runs float ones, and
    AVX-512's (16 lanes, whole panels) through ``vpmaddubsw`` or VNNI's ``vpdpbusd``: each where the CPU has
    its instructions."""
    needed = "avx512vnni" if dot else "avx512bw" if lanes == 16 else "avx2"
    if not vector_kernels._host_has(needed):
        pytest.skip(f"this CPU has no {needed}")
    x, weight, bias = random_operands(rows * columns, rows, 37, 128, True)
    panels, bias_scales_corrections = vector_kernels.pack_bytes(weight, bias, stripe)
    quads, row_scales = vector_kernels.byte_quads(x)
    out = _tiles_of(rows, columns, lanes, dot)(quads, panels, bias_scales_corrections) * row_scales[:, None] + bias
    values, scales = vector_kernels.int8_columns(weight, vector_kernels.BYTE_WEIGHT_LARGEST)
    expected = rounded_rows(x) @ (values.astype(np.float64) * scales) + bias
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * 37 ** 0.5)


@pytest.mark.parametrize("bytes_here", [True, False])
def test_int8_products_use_byte_tiles_where_the_cpu_has_them(monkeypatch, bytes_here):
    from pardec_fairseq.decoding.fast_ops import Product
    monkeypatch.setattr(vector_kernels, "has_byte_products", lambda: bytes_here)
    product = Product(torch.ones(8, 64), None, "int8")
    assert product.panels.dtype == (np.uint32 if bytes_here else np.int8)
