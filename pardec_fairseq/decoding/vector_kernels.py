"""Matrix products of a few rows on a CPU: register-blocked vector kernels emitted as LLVM IR.

Why: a decoding pass multiplies a few rows (1 for greedy, 8-30 for a draft or a tree) by each weight
matrix, and on this project's AMD CPU (one thread, d-256 layers) the libraries at hand are far
from the core's arithmetic peak at those shapes: 8 rows x (256, 1024) took 59 us on oneDNN with a
packed weight (71 GFLOP/s) and 150 us on OpenBLAS, one row 15 us on OpenBLAS (gemv). A kernel that
keeps a tile of up to 4 rows x 64 output columns in 16 vector registers while it streams the
weight once ran the same products in 37 us (115 GFLOP/s) and 12 us. numba cannot express such a
tile (its vectoriser left the scalar version at 7 GFLOP/s), so the tile is written in LLVM IR
through a numba intrinsic: it is compiled and cached with the numba code that calls it and needs no
C compiler. With AVX-512 the float32 tile's loop is inline assembly in that IR, its registers fixed
(``_fixed_register_loop``): LLVM's own allocation of them spilled, and differently from compile to
compile. Its vectors are the CPU's: 16 floats with AVX-512, else 8; with AVX2's 16 registers the tiles
cover fewer columns (``TILE_COLUMNS``): on an AMD Zen 3 core, 8 rows x (256, 1024) took 137-146
us in AVX-512's tiles (their accumulators spilled to the stack) and 65-77 us in 16-column ones.

The weight is packed once into panels of 64 output columns, the last one padded with zeros, each
panel in stripes as wide as the narrowest tile (``STRIPE``: the whole panel with AVX-512, 16 columns
with AVX2), ``[panels, stripes, in, stripe]``: each tile then reads its part of the weight as one
stream of contiguous rows, and a product reads the whole weight in memory order.

A weight whose products need not be exact (a drafter's: the verifier checks every drafted token in
float32) may be packed in bfloat16 instead (``pack_bfloat16``), half the bytes. Where numba compiles
for a CPU with AVX-512's bfloat16 dot product the tile multiplies pairs of bfloat16 rows, twice the
multiply-adds per instruction; elsewhere it widens each loaded bfloat16 to float32 in a register (a
shift) and multiplies in float32: on the Zen 3 VM (AVX2), whose caches the verifier and a drafter
share, that made `gad`'s draft heads 4-8% and `bpd`'s heads 10% faster per token at batch 1.
Or in bytes (``pack_bytes``): the weight rounded to int8 per column, each row rounded to bytes as it
comes, multiplied and summed in integers by AVX2's byte multiply-adds, 32 per instruction pair. On
the Zen 3 VM (2 threads, weights in cache) one row of a (256, 4096) weight took 41 us so, 90 with
the int8 weight converted to float32 in registers and 49 in float32; the draft head's three steps
a pass 347 us against 648.
"""
from typing import Optional

import numba
import numpy as np
import torch
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

PANEL = 64  # output columns of a packed weight's panel


def _host_has(feature: str) -> bool:
    """Whether numba compiles for this CPU and it has ``feature`` (LLVM's name for it)."""
    if numba.config.CPU_NAME not in (None, "host"):
        return False
    return bool(llvm.get_host_cpu_features().get(feature, False))


# floats per vector register: 16 with AVX-512 (32 registers), else 8 (AVX2: 16 registers)
LANES = 16 if _host_has("avx512f") else 8
# the float32 AVX-512 tiles' loop is inline assembly (``_fixed_register_loop``), which LLVM must parse
llvm.initialize_native_asmparser()
# columns of the panel a tile of 1..6 rows covers, so that its accumulators, the weight's vectors
# and a broadcast fit the registers: 4 rows x 64 columns take 16 of AVX-512's 32, while with AVX2's
# 16 the same tile spilled to the stack (4 x 8 accumulators); there a tile of 3-5 rows covers 16
# columns (5 rows: 10 accumulators, 2 weight vectors, a broadcast) and one of 2 rows 32 (AVX2 has
# no 6-row tile: ``WIDEST_TILE``)
TILE_COLUMNS = (0, PANEL, PANEL, PANEL, PANEL, PANEL, PANEL) if LANES == 16 else (0, PANEL, 32, 16, 16, 16)
# rows of a full tile: a pass's weights are read from memory once per tile, so a pass over up to
# TILE_ROWS tokens costs what a one-token pass does. With AVX2, 5. A 6-row tile (12 accumulators)
# ran as fast as 5 rows where its code was compiled in the process, but numba's cached copy of it,
# what every later run executes, took 1.5x as long: on the Zen 3 VM (2 threads, weights in cache,
# one process) 6, 8, 12 and 20 rows x (256, 1024) took 45, 58, 81 and 117 us cached against 29, 44,
# 52 and 78 freshly compiled (5 rows: 24 and 26). Cached tiles of 5 rows (6 = 5 + 1) took 32, 34, 44
# and 73 us. With AVX-512 the tiles stay at the 4 rows measured there.
TILE_ROWS = 4 if LANES == 16 else 5
# the most rows one tile takes, so that a pass of up to this many tokens reads each weight once: AVX-512's
# fixed-register loop holds 6 rows' 24 accumulators beside its 5 fixed registers. On the Intel Xeon VM
# (2 threads, weights in cache, 2026-11-29) 6 rows x (256, 8,296) took 169 us in one tile against 240 as
# 4 + 2 (5 rows: 165, one: 157), and a `gad` tree of 6 tokens cost a pass what one of 5 had
WIDEST_TILE = 6 if LANES == 16 else TILE_ROWS
# columns of a panel that ``pack`` stores together: the narrowest tile's, so that a tile reads its
# weights in memory order. Interleaved across the panel, the 16-column tiles of AVX2 read every
# 256-byte row in four parts: from memory on a Zen 3 core, 4 rows x (256, 1024) took 120-169 us so,
# and 71-72 us in stripes (one row: 52-60 us across the panel, 36-44 us in stripes)
STRIPE = PANEL if LANES == 16 else 16
# how many of a stripe's rows ahead a one-row tile, or a drafter's tile, asks for its weights (software
# prefetch, ``_prefetch_locality``; float32 tiles of several rows: ``EXACT_ROWS_PREFETCH_BYTES``)
PREFETCH_ROWS = 16
# how far ahead in each stripe a tile of several rows asks for float32 weights (the verifier's, mostly
# read from memory each pass): such a tile spends several cycles on each 64-byte row of its stripe, and
# 16 rows ahead its reads waited on memory. On the Zen 3 VM (2 threads; five 8.5 MB weights in turn, so
# each comes from memory) 5 rows x (256, 8296) took 1.22-1.60 times one row's time 16 rows ahead,
# 1.01-1.09 times 128 rows (8 KB) ahead (AVX-512's wider stripes, 32 rows, were not measured). One-row
# tiles keep 16 rows: further ahead slowed greedy's steps
EXACT_ROWS_PREFETCH_BYTES = 8192
# how far ahead in its stripe AVX-512's float32 tile (``_fixed_register_loop``) asks for its weights, into
# every cache level (``prefetcht0``): with the hardware's prefetch alone, on the Intel Xeon VM the
# tile's arithmetic waited on its reads from L3. There (2 threads, 2026-11-29) the verifier's decoder
# layers took 370 us over 6 tokens and 283 over one against 384 and 282 unhinted, its encoder 783 us
# for 20 source tokens against 888, and on the first 200 LibreOffice sentences greedy ran 0.904 ms a
# token against 0.936 (`gad` with the draft head 0.583 against 0.608). Non-temporally (``prefetchnta``)
# the lines skipped L3 and came from memory each pass: the layers over 2-6 tokens took 755-987 us
FIXED_PREFETCH_BYTES = 4096
# a byte product's weight levels either side of zero: 2 * 255 * 63 fits the int16 sums of vpmaddubsw
BYTE_WEIGHT_LARGEST = 63


class _BFloat(ir.Type):
    """LLVM's ``bfloat`` (llvmlite has no class for it): the operand type of the bfloat16 dot product."""

    def _to_string(self):
        return "bfloat"

    def __eq__(self, other):
        return isinstance(other, _BFloat)

    def __hash__(self):
        return hash("bfloat")


def _prefetch_locality(rows: int, exact: bool):
    """How a tile asks for its weights ahead (LLVM's prefetch locality), or ``None``: not at all.

    Float32 weights (``exact``: the verifier's) are read once a pass and a pass reads more of them than
    the last-level cache holds (the recipe's verifier 19.5 MB, the Zen 3 VM's L3 8 MB), so they are
    asked for non-temporally (0): they stream through without evicting what stays, the drafter's
    weights and the caches. On the Zen 3 VM (2 threads, first 100 LibreOffice sentences) a greedy
    pass took 2.25-2.40 ms so against 2.61-2.65 unhinted, a `gad` pass with the draft head 3.54-3.90
    against 4.25-4.39. A drafter's weights (quantized) are read again at each step: a tile of several
    rows asks for them to stay (3), since without a hint its arithmetic and its reads from memory take
    turns (measured on the verifier before the non-temporal hint: its 4-token pass's arithmetic took
    1.47 ms unhinted, 1.33 with this one 16 rows ahead, 1.30-1.37 8 ahead, 1.43 32 ahead); one row
    streams fast enough unhinted (and was slower hinted). With AVX-512 the float32 tiles run
    ``_fixed_register_loop``, which asks for them into every cache level (``FIXED_PREFETCH_BYTES``)."""
    if exact:
        return 0
    return 3 if rows > 1 else None


def _prefetch_rows(rows: int, exact: bool) -> int:
    """How many of a stripe's rows ahead a tile of ``rows`` asks for its weights."""
    if exact and rows > 1:
        return EXACT_ROWS_PREFETCH_BYTES // (4 * STRIPE)
    return PREFETCH_ROWS


def _byte_multiply_add(builder, lanes: int, dot: bool):
    """``multiply_add(x, w, total)`` of int32 lanes each holding 4 bytes: ``total`` plus, per lane, the sum
    of the 4 products of ``x``'s unsigned bytes and ``w``'s signed ones (AVX2's ``vpmaddubsw``, then
    ``vpmaddwd`` by ones; AVX-512BW's with 16 lanes; where ``dot``, AVX-512 VNNI's ``vpdpbusd``, which
    does both and the addition in one instruction). ``vpmaddubsw`` saturates a pair's sum to int16:
    ``pack_bytes`` keeps weights within 63 so that 2 * 255 * 63 fits, and the sums are the same either way."""
    words, shorts = ir.VectorType(ir.IntType(32), lanes), ir.VectorType(ir.IntType(16), 2 * lanes)
    octets = ir.VectorType(ir.IntType(8), 4 * lanes)
    if dot:
        quad_dot = cgutils.get_or_insert_function(builder.module, ir.FunctionType(words, [words] * 3),
                                                  "llvm.x86.avx512.vpdpbusd.512")
        return lambda x, w, total: builder.call(quad_dot, [total, x, w])
    width = {8: ("avx2", "pmadd.ub.sw", "pmadd.wd"), 16: ("avx512", "pmaddubs.w.512", "pmaddw.d.512")}[lanes]
    pair_sums = cgutils.get_or_insert_function(builder.module, ir.FunctionType(shorts, [octets, octets]),
                                               f"llvm.x86.{width[0]}.{width[1]}")
    quad_sums = cgutils.get_or_insert_function(builder.module, ir.FunctionType(words, [shorts, shorts]),
                                               f"llvm.x86.{width[0]}.{width[2]}")
    ones = ir.Constant(shorts, [1] * 2 * lanes)

    def multiply_add(x, w, total):
        pairs = builder.call(pair_sums, [builder.bitcast(x, octets), builder.bitcast(w, octets)])
        return builder.add(total, builder.call(quad_sums, [pairs, ones]))
    return multiply_add


def _tile(rows: int, columns: int, lanes: int = LANES, byte_dot: Optional[bool] = None):
    """An intrinsic ``tile(x, r0, panels, p, q, bias, out, o0, c0)``: ``out[o0:o0+rows,
    c0+q:c0+q+columns] = x[r0:r0+rows] @ (columns q:q+columns of panel p) + bias[64p+q:64p+q+columns]``,
    all C-contiguous, ``out`` with at least 64 columns from ``c0``, ``panels`` as ``pack`` lays them
    out (``[panels, stripes, in, stripe]``; ``columns`` within a stripe, or whole stripes). Float32
    ``x`` and ``panels`` multiply-add in float32; int32 ones hold bfloat16 pairs (``bfloat16_pairs``,
    ``pack_bfloat16_pairs``) and go through AVX-512's bfloat16 dot product, two multiply-adds per lane
    and instruction, accumulated in float32; uint16 ``panels`` (``pack_bfloat16_values``) are widened
    to float32 as they are loaded, int8 ones (``pack_int8``) converted to float32, their sums then
    multiplied by the column scales that follow the bias in ``bias``; uint32 ``x`` and ``panels`` hold 4
    bytes each (``byte_quads``, ``pack_bytes``), multiplied and summed in int32 lanes
    (``_byte_multiply_add``), the sums less the corrections that follow the scales, times the scales
    (``finish_rows`` scales the rows and adds the bias). Tiles ask for their weights ahead as
    ``_prefetch_locality`` and ``_prefetch_rows`` say. ``lanes``: floats per vector (LLVM splits wider
    ones; byte tiles need 8, or 16 with AVX-512BW); ``byte_dot``: byte tiles through AVX-512 VNNI's dot
    product (16 lanes; by default where the CPU has it)."""
    if byte_dot is None:
        byte_dot = lanes == 16 and _host_has("avx512vnni")
    vectors = columns // lanes

    @intrinsic
    def tile(typingctx, x, r0, panels, p, q, bias, out, o0, c0):
        operands, floats = (x, panels), (bias, out)
        if any(not isinstance(a, types.Array) or a.layout != "C" for a in operands + floats) or \
                any(a.dtype != types.float32 for a in floats) or \
                (x.dtype, panels.dtype) not in ((types.float32, types.float32), (types.int32, types.int32),
                                                (types.float32, types.uint16), (types.float32, types.int8),
                                                (types.uint32, types.uint32)):
            return None
        pairs, widened, quantized = x.dtype == types.int32, panels.dtype == types.uint16, panels.dtype == types.int8
        quads = x.dtype == types.uint32
        signature = types.void(x, r0, panels, p, q, bias, out, o0, c0)

        def codegen(context, builder, signature, args):
            x_arg, r0_arg, panels_arg, p_arg, q_arg, bias_arg, out_arg, o0_arg, c0_arg = args
            x_data = cgutils.create_struct_proxy(signature.args[0])(context, builder, value=x_arg)
            panel_data = cgutils.create_struct_proxy(signature.args[2])(context, builder, value=panels_arg)
            bias_data = cgutils.create_struct_proxy(signature.args[5])(context, builder, value=bias_arg)
            out_data = cgutils.create_struct_proxy(signature.args[6])(context, builder, value=out_arg)
            i64, i32 = ir.IntType(64), ir.IntType(32)
            vector = ir.VectorType(ir.FloatType(), lanes)
            # what a row of a panel holds: floats, bfloat16 pairs or byte quads, bfloat16 values or int8
            # ones to widen
            operand = ir.VectorType(i32, lanes) if pairs or quads \
                else ir.VectorType(ir.IntType(16), lanes) if widened \
                else ir.VectorType(ir.IntType(8), lanes) if quantized else vector
            # byte quads sum in int32 lanes, everything else in float32 ones
            accumulated = ir.VectorType(i32, lanes) if quads else vector
            if quads:
                multiply_add = _byte_multiply_add(builder, lanes, byte_dot)
            elif pairs:
                bfloats = ir.VectorType(_BFloat(), 2 * lanes)
                dot = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector, bfloats, bfloats]),
                                                     "llvm.x86.avx512bf16.dpbf16ps.512")

                def multiply_add(a, b, total):
                    return builder.call(dot, [total, builder.bitcast(a, bfloats), builder.bitcast(b, bfloats)])
            else:
                fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector] * 3),
                                                     f"llvm.fma.v{lanes}f32")

                def multiply_add(a, b, total):
                    return builder.call(fma, [a, b, total])
            depth = cgutils.unpack_tuple(builder, x_data.shape, 2)[1]
            _, _, panel_depth, stripe = cgutils.unpack_tuple(builder, panel_data.shape, 4)
            out_width = cgutils.unpack_tuple(builder, out_data.shape, 2)[1]

            def const(value):
                return ir.Constant(i64, value)

            def load_vector(pointer, offset, kind=vector):
                address = builder.gep(pointer, [offset])
                alignment = getattr(kind.element, "width", 32) // 8  # a float's, or an integer element's
                return builder.load(builder.bitcast(address, kind.as_pointer()), align=alignment)

            sixteen = ir.Constant(ir.VectorType(i32, lanes), [16] * lanes)

            def load_weights(pointer, offset):
                """A vector of a panel's row as the multiply-adds take it: a bfloat16's bits are the high
                half of the float32 it stands for; an int8 is converted (its column's scale comes last)."""
                loaded = load_vector(pointer, offset, operand)
                if quantized:
                    return builder.sitofp(builder.sext(loaded, ir.VectorType(i32, lanes)), vector)
                if not widened:
                    return loaded
                return builder.bitcast(builder.shl(builder.zext(loaded, ir.VectorType(i32, lanes)), sixteen), vector)

            # where vector v's columns start: in their stripe, whose rows are ``stripe`` floats apart
            panel = builder.gep(panel_data.data, [builder.mul(builder.mul(p_arg, panel_depth), const(PANEL))])
            starts = []
            for v in range(vectors):
                column = builder.add(q_arg, const(v * lanes))
                stripe_start = builder.mul(builder.udiv(column, stripe), builder.mul(panel_depth, stripe))
                starts.append(builder.gep(panel, [builder.add(stripe_start, builder.urem(column, stripe))]))
            panel_bias = builder.gep(bias_data.data, [builder.add(builder.mul(p_arg, const(PANEL)), q_arg)])
            # an int8 weight's column scales follow its bias (``pack_int8``): the sums start at zero and
            # are scaled, then biased, at the end
            panel_count = cgutils.unpack_tuple(builder, panel_data.shape, 4)[0]
            panel_scale = builder.gep(panel_bias, [builder.mul(panel_count, const(PANEL))])
            # accumulators live in stack slots that LLVM promotes to registers
            accumulators = [[cgutils.alloca_once(builder, accumulated) for _ in range(vectors)] for _ in range(rows)]
            for v in range(vectors):
                start = ir.Constant(accumulated, [0] * lanes) if quads else ir.Constant(vector, [0.0] * lanes) \
                    if quantized else load_vector(panel_bias, const(v * lanes))
                for r in range(rows):
                    builder.store(start, accumulators[r][v])
            x_rows = [builder.gep(x_data.data, [builder.mul(builder.add(r0_arg, const(r)), depth)])
                      for r in range(rows)]
            exact = not (quads or quantized or widened or pairs)
            if exact and lanes == LANES == 16 and vectors == 4:  # AVX-512's own registers: the CPU must have them
                _fixed_register_loop(builder, depth, starts, stripe, x_rows, accumulators)
            else:
                x_type = ir.VectorType(i32, lanes) if pairs or quads else vector  # what a row of x broadcasts to
                _scheduled_loop(builder, depth, stripe, starts, x_rows, accumulators, x_type, exact, load_weights,
                                multiply_add)
            for r in range(rows):
                out_row = builder.gep(out_data.data, [builder.add(builder.mul(builder.add(o0_arg, const(r)), out_width),
                                                                  builder.add(c0_arg, q_arg))])
                for v in range(vectors):
                    target = builder.bitcast(builder.gep(out_row, [const(v * lanes)]), vector.as_pointer())
                    total = builder.load(accumulators[r][v])
                    if quantized:
                        total = builder.call(fma, [total, load_vector(panel_scale, const(v * lanes)),
                                                   load_vector(panel_bias, const(v * lanes))])
                    elif quads:  # (sum - the shift's share) * column scale; the row scale and bias come after
                        correction = load_vector(builder.gep(panel_scale, [builder.mul(panel_count, const(PANEL))]),
                                                 const(v * lanes))
                        total = builder.fmul(builder.fsub(builder.sitofp(total, vector), correction),
                                             load_vector(panel_scale, const(v * lanes)))
                    builder.store(total, target, align=4)
            return context.get_dummy_value()

        return signature, codegen

    return tile


def _scheduled_loop(builder, depth, stripe, starts, x_rows, accumulators, x_type, exact, load_weights, multiply_add):
    """A tile's loop over the weight's rows as LLVM IR, scheduled and register-allocated by LLVM (``_tile``):
    each row of x broadcast to ``x_type``, the weights asked for ahead as ``_prefetch_locality`` says."""
    i32 = ir.IntType(32)
    rows, vectors, lanes = len(accumulators), len(accumulators[0]), x_type.count
    locality, rows_ahead = _prefetch_locality(rows, exact), _prefetch_rows(rows, exact)
    prefetch = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32]),
        "llvm.prefetch.p0i8")
    undefined, splat = ir.Constant(x_type, ir.Undefined), ir.Constant(ir.VectorType(i32, lanes), [0] * lanes)
    with cgutils.for_range(builder, depth) as loop:
        row_offset = builder.mul(loop.index, stripe)
        ahead = builder.mul(builder.add(loop.index, ir.Constant(ir.IntType(64), rows_ahead)), stripe)
        for v in range(vectors):
            if locality is not None and (v * lanes) % 16 == 0:  # a cache line's first vector
                address = builder.bitcast(builder.gep(starts[v], [ahead]), ir.IntType(8).as_pointer())
                builder.call(prefetch, [address, ir.Constant(i32, 0), ir.Constant(i32, locality),
                                        ir.Constant(i32, 1)])
        weights = [load_weights(starts[v], row_offset) for v in range(vectors)]
        for r in range(rows):
            scalar = builder.load(builder.gep(x_rows[r], [loop.index]))
            broadcast = builder.shuffle_vector(builder.insert_element(undefined, scalar, ir.Constant(i32, 0)),
                                               undefined, splat)
            for v in range(vectors):
                total = multiply_add(broadcast, weights[v], builder.load(accumulators[r][v]))
                builder.store(total, accumulators[r][v])


def _fixed_register_loop(builder, depth, starts, stripe, x_rows, accumulators):
    """A float32 AVX-512 tile's loop over the weight's rows (4 vectors, from ``starts``) as inline assembly: the
    weight vectors and the broadcast row value sit in fixed registers (zmm27-31), the accumulators (up to 20)
    in registers LLVM chooses, so no compile of it spills. Why: numba compiles a tile twice, on its own and
    linked into ``product``'s library, a process that compiles runs the one and a process that loads numba's
    cache the other, and LLVM's 5-row tile spilled differently in each: on a Zen 4 VM 5 rows x (256, 8,296)
    from L3 took 113 us in one and 282 in the other; this loop ran alike in both, and in the decoding loop (both
    loaded from numba's cache, pass by pass in one process) a one-token pass's layers took 4-8% less time than
    with LLVM's loop, `gad`'s 5-token ones 4-6% less. Its weights are asked for ``FIXED_PREFETCH_BYTES``
    ahead, into every cache level: on the Zen 4 VM the hardware's prefetch alone streamed these rows (from
    memory 5 rows cost what one does, 274-284 us against 324-330 asked for non-temporally), on the Intel
    Xeon VM it did not."""
    rows = len(accumulators)
    vector = accumulators[0][0].type.pointee
    count = rows * 4
    body = [f"vmovups (${count + v}), %zmm{28 + v}" for v in range(4)]
    body += [f"prefetcht0 {FIXED_PREFETCH_BYTES}(${count + v})" for v in range(4)]
    for r in range(rows):
        body.append(f"vbroadcastss (${count + 4 + r}), %zmm27")
        body += [f"vfmadd231ps %zmm{28 + v}, %zmm27, ${4 * r + v}" for v in range(4)]
    constraint = ",".join(["=v"] * count + ["r"] * (4 + rows) + [str(i) for i in range(count)]
                          + [f"~{{xmm{k}}}" for k in range(27, 32)])
    byte_pointer = ir.IntType(8).as_pointer()
    signature = ir.FunctionType(ir.LiteralStructType([vector] * count), [byte_pointer] * (4 + rows) + [vector] * count)
    with cgutils.for_range(builder, depth) as loop:
        offset = builder.mul(loop.index, stripe)
        weights = [builder.bitcast(builder.gep(start, [offset]), byte_pointer) for start in starts]
        values = [builder.bitcast(builder.gep(x_rows[r], [loop.index]), byte_pointer) for r in range(rows)]
        totals = [builder.load(accumulators[r][v]) for r in range(rows) for v in range(4)]
        result = builder.asm(signature, "\n".join(body), constraint, weights + values + totals, False)
        for i in range(count):
            builder.store(builder.extract_value(result, i), accumulators[i // 4][i % 4])


_tile1, _tile2, _tile3, _tile4, _tile5 = (_tile(rows, TILE_COLUMNS[rows]) for rows in range(1, 6))
_COLUMNS1, _COLUMNS2, _COLUMNS3, _COLUMNS4, _COLUMNS5 = TILE_COLUMNS[1:6]
_tile6 = _tile(6, PANEL) if WIDEST_TILE == 6 else _tile5  # never called without AVX-512


@numba.njit(cache=True, nogil=True)
def _rows_into(x, r, rows, panels, p, bias, out, c0):
    """Rows ``r .. r + rows - 1`` (1 to ``WIDEST_TILE``) of ``x`` times panel ``p`` into ``out[:, c0:c0+64]``:
    one tile across the panel in its ``TILE_COLUMNS``."""
    if rows == 6:
        _tile6(x, r, panels, p, 0, bias, out, r, c0)
    elif rows == 5:
        for q in range(0, PANEL, _COLUMNS5):
            _tile5(x, r, panels, p, q, bias, out, r, c0)
    elif rows == 4:
        for q in range(0, PANEL, _COLUMNS4):
            _tile4(x, r, panels, p, q, bias, out, r, c0)
    elif rows == 3:
        for q in range(0, PANEL, _COLUMNS3):
            _tile3(x, r, panels, p, q, bias, out, r, c0)
    elif rows == 2:
        for q in range(0, PANEL, _COLUMNS2):
            _tile2(x, r, panels, p, q, bias, out, r, c0)
    elif rows == 1:
        for q in range(0, PANEL, _COLUMNS1):
            _tile1(x, r, panels, p, q, bias, out, r, c0)


@numba.njit(cache=True, nogil=True)
def panel_into(x, panels, p, bias, out, c0):
    """Every row of ``x`` times panel ``p`` into ``out[:, c0:c0+64]``: in tiles of ``TILE_ROWS`` rows (the
    panel stays in the second-level cache between them) and one of the rest. The rest joins the last
    tile where one tile takes them all (``WIDEST_TILE``: AVX-512's 4 + 1 and 4 + 2 rows): a one-row
    tile's 4 accumulator chains leave the FMA pipes half idle, so as 4 + 1 rows 5 took 1.2x as long."""
    rows = x.shape[0]
    r = 0
    while r < rows:
        left = rows - r
        take = left if left <= WIDEST_TILE else TILE_ROWS
        _rows_into(x, r, take, panels, p, bias, out, c0)
        r += take


# multiply-adds from which a product shares its panels among numba's threads: measured on this
# project's CPU (2 cores, weights in cache), 5 rows x (256, 8192) took 190 us on one thread and 98
# on two, one row 100 and 54; one row of a (256, 768) weight (2^17.6) 14.2 and 8.8 us in float32,
# 30 and 17 in int8, one of a (256, 256) weight (2^16) 4.5 and 4.6 in float32, 10.2 and 7.2 in int8
PARALLEL_WORK = 1 << 16
# the same for byte products (``pack_bytes``), which do four times the multiply-adds a float32 one does
# per instruction and read a quarter of the bytes. Alone and hot, sharing costs more than it saves below
# a weight of 2^20 bytes: on a Zen 3 VM (2 threads) one row of a (256, 256), (512, 256) and (1024, 256)
# byte weight took 6.9, 7.4 and 8.9 us shared and 2.0, 2.1 and 4.2 on one thread, (256, 1024) 5.3 and 4.9;
# (256, 4096) 16.6 and 21.7. But a drafter's products come one after another, and their weights together
# (the draft head's: 2.0 MB with the verifier layer it reads through) fill a core's L2 (2 MB on the
# Intel Xeon VM), so on one core each step fetches them again from further out. From 2^17 (the products
# of a 256-wide layer's q/k/v, fc1, fc2 and the draft projection) each core keeps half of them: on that VM
# (2026-12-04, first 200 LibreOffice sentences, three alternating processes each) the head's drafting
# call in the loop took 457-503 us against 509-561 and `gad` ran 1.36-1.40x plugin greedy against
# 1.31-1.33x; from 2^16, 482 us and 1.35x. On the Zen 3 VM (512 KB of L2) 2^17 gave 1.34-1.42x against
# 1.34-1.38x (stop 90).
PARALLEL_BYTE_WORK = 1 << 17


def parallel_work(panels):
    """The multiply-adds from which a product with ``panels`` shares them among numba's threads."""


@overload(parallel_work)
def _parallel_work(panels):
    if panels.dtype == types.uint32:
        return lambda panels: PARALLEL_BYTE_WORK
    return lambda panels: PARALLEL_WORK


@numba.njit(cache=True, nogil=True, parallel=True)
def _panels_in_parallel(x, panels, bias, out, full):
    for p in numba.prange(full):
        panel_into(x, panels, p, bias, out, p * PANEL)


@numba.njit(cache=True, nogil=True)
def bfloat16_bits(x):
    """The bfloat16 nearest to each float32 of ``x`` (ties to even), as the high half's 16 bits."""
    bits = x.view(np.uint32)
    return (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)


@numba.njit(cache=True, nogil=True)
def bfloat16_pairs(x):
    """Float32 rows ``[rows, in]`` (C-contiguous) as int32 ``[rows, ceil(in / 2)]``: elements ``2i``
    and ``2i + 1`` in bfloat16, in the low and high half (an odd last element paired with zero)."""
    rows, depth = x.shape
    bits = bfloat16_bits(x)
    pairs = np.zeros((rows, (depth + 1) // 2), dtype=np.uint32)
    for r in range(rows):
        for i in range(depth):
            pairs[r, i // 2] |= bits[r, i] << np.uint32(16 * (i % 2))
    return pairs.view(np.int32)


@numba.njit(cache=True, nogil=True)
def byte_quads(x):
    """Float32 rows ``[rows, in]`` rounded to 255 levels each (a scale per row: its largest magnitude maps
    to 127), shifted by 128 to unsigned bytes, 4 to a uint32 ``[rows, ceil(in / 4)]`` (zero-padded); and
    the scales. The largest magnitude is the largest of 16 running ones, so that the comparisons need not
    wait on each other: one at a time, a 256-wide row took 0.47 us against 0.30 on the Intel Xeon VM."""
    rows, depth = x.shape
    octets = np.zeros((rows, 4 * ((depth + 3) // 4)), dtype=np.uint8)
    scales = np.empty(rows, dtype=np.float32)
    lanes = np.empty(16, dtype=np.float32)
    for r in range(rows):
        lanes[:] = 0.0
        for i in range(depth):
            lanes[i % 16] = max(lanes[i % 16], abs(x[r, i]))
        largest = np.float32(0.0)
        for lane in range(16):
            largest = max(largest, lanes[lane])
        scales[r] = largest / np.float32(127) if largest > 0 else np.float32(1)
        inverse = np.float32(1) / scales[r]
        for i in range(depth):
            octets[r, i] = np.uint8(np.int32(np.rint(x[r, i] * inverse)) + 128)
    return octets.view(np.uint32), scales


def rows_for(x, panels):
    """``x`` as ``panels`` multiply it and each row's scale: itself, or its bfloat16 pairs for bfloat16
    panels (no scales), or its byte quads and their scales for byte panels (``byte_quads``)."""


@overload(rows_for)
def _rows_for(x, panels):
    if panels.dtype == types.int32:
        return lambda x, panels: (bfloat16_pairs(x), None)
    if panels.dtype == types.uint32:
        return lambda x, panels: byte_quads(x)
    return lambda x, panels: (x, None)


def finish_rows(out, panels, scales, bias):
    """A byte product's rows (``pack_bytes``'s panels) times their scales, plus the bias (first in
    ``bias``); the other panels' tiles leave their output final."""


@overload(finish_rows)
def _finish_rows(out, panels, scales, bias):
    if panels.dtype != types.uint32:
        return lambda out, panels, scales, bias: None

    def scale_and_bias(out, panels, scales, bias):
        for r in range(out.shape[0]):
            for c in range(out.shape[1]):
                out[r, c] = out[r, c] * scales[r] + bias[c]
    return scale_and_bias


@numba.njit(cache=True, nogil=True)
def product(x, panels, bias, columns):
    """``x @ weight + bias`` for ``x`` ``[rows, in]`` (C-contiguous float32), the weight packed by
    ``pack`` (float32) or ``pack_bfloat16`` (in pairs, the rows then rounded to bfloat16 too) and ``bias`` by
    ``pack_bias``; ``columns``: the weight's output width. Large products share their panels among
    numba's threads (as many as ``numba.set_num_threads`` says: callers set torch's number with
    ``follow_torch_threads``)."""
    out = np.empty((x.shape[0], columns), dtype=np.float32)
    full = columns // PANEL
    operand, scales = rows_for(x, panels)
    if x.shape[0] * x.shape[1] * columns >= parallel_work(panels):
        _panels_in_parallel(operand, panels, bias, out, full)
    else:
        for p in range(full):
            panel_into(operand, panels, p, bias, out, p * PANEL)
    if full < panels.shape[0]:  # the padded last panel goes through a scratch tile
        scratch = np.empty((x.shape[0], PANEL), dtype=np.float32)
        panel_into(operand, panels, full, bias, scratch, 0)
        out[:, full * PANEL:] = scratch[:, :columns - full * PANEL]
    finish_rows(out, panels, scales, bias)
    return out


def has_bfloat16_dot() -> bool:
    """Whether numba compiles for a CPU with AVX-512's bfloat16 dot product (``pack_bfloat16_pairs``'s panels)."""
    return _host_has("avx512bf16")


def follow_torch_threads():
    """Run the large products on as many threads as torch is told to use (per thread, as torch's own
    setting is). numba's first call launches its OpenMP pool, which sets the process's OpenMP threads,
    torch's among them, to every core: torch gets its own count back."""
    threads = torch.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def pack(weight: np.ndarray, stripe: int = STRIPE) -> np.ndarray:
    """An ``(in, out)`` float32 weight as ``[panels, 64 / stripe, in, stripe]``: panels of 64 output
    columns (the last one zero-padded), each in stripes of ``stripe`` columns."""
    depth, columns = weight.shape
    count = -(-columns // PANEL)
    padded = np.zeros((depth, count * PANEL), dtype=np.float32)
    padded[:, :columns] = weight
    return np.ascontiguousarray(padded.reshape(depth, count, PANEL // stripe, stripe).transpose(1, 2, 0, 3))


def pack_bfloat16_values(weight: np.ndarray) -> np.ndarray:
    """An ``(in, out)`` float32 weight rounded to bfloat16, laid out as ``pack`` lays it (uint16, the
    float32's high half): without AVX-512's bfloat16 dot product the tile widens each value to float32
    in a register and multiplies in float32, reading half the bytes."""
    packed = pack(weight)
    return bfloat16_bits(packed.reshape(-1)).astype(np.uint16).reshape(packed.shape)


def int8_columns(weight: np.ndarray, largest: int = 127):
    """An ``(in, out)`` float32 weight as int8 values and a float32 scale per output column (the
    column's largest magnitude maps to ``largest``): ``values * scales`` is the weight rounded."""
    scales = np.abs(weight).max(axis=0) / np.float32(largest)
    scales = np.where(scales > 0, scales, np.float32(1)).astype(np.float32)
    return np.clip(np.rint(weight / scales), -largest, largest).astype(np.int8), scales


def pack_int8(weight: np.ndarray, bias=None):
    """An ``(in, out)`` float32 weight rounded to int8 per output column (``int8_columns``), laid out as
    ``pack`` lays it, a quarter of float32's bytes; and its bias (``None``: zeros) and scales padded to
    whole panels, one after the other, as the tile reads them."""
    values, scales = int8_columns(weight)
    columns = weight.shape[1]
    return pack(values.astype(np.float32)).astype(np.int8), \
        np.concatenate([pack_bias(bias, columns), pack_bias(scales, columns)])


def pack_bytes(weight: np.ndarray, bias=None, stripe: int = STRIPE):
    """An ``(in, out)`` float32 weight for byte products: rounded per output column to 127 levels (the
    column's largest magnitude maps to 63, so that ``vpmaddubsw``'s pair sums cannot saturate), each
    column's 4 consecutive inputs in one uint32, laid out as ``pack`` lays floats (``[panels, 64 /
    stripe, ceil(in / 4), stripe]``); the rows it multiplies are rounded to bytes as they come
    (``byte_quads``), so a product reads a quarter of float32's bytes and does 4 multiply-adds per lane
    and instruction. With the panels, the bias, the column scales and the corrections for the rows'
    shift by 128, each padded to whole panels, one after the other."""
    depth, columns = weight.shape
    values, scales = int8_columns(weight, BYTE_WEIGHT_LARGEST)
    quads = -(-depth // 4)
    # ``pack``'s layout of the inputs padded to whole quads, then each column's 4 inputs side by side:
    # [panels, stripes, quads, 4, stripe] -> [panels, stripes, quads, stripe, 4]
    packed = pack(np.pad(values, ((0, 4 * quads - depth), (0, 0))).astype(np.float32), stripe).astype(np.int8)
    panels, stripes, _, stripe = packed.shape
    laid = packed.reshape(panels, stripes, quads, 4, stripe).transpose(0, 1, 2, 4, 3)
    corrections = np.float32(128) * values.astype(np.float32).sum(axis=0)
    return np.ascontiguousarray(laid).view(np.uint32).reshape(panels, stripes, quads, stripe), \
        np.concatenate([pack_bias(bias, columns), pack_bias(scales, columns), pack_bias(corrections, columns)])


def has_byte_products() -> bool:
    """Whether numba compiles for a CPU with the byte multiply-adds of ``pack_bytes``'s tiles: AVX2's (8
    lanes) or AVX-512BW's (16)."""
    return _host_has("avx512bw") if LANES == 16 else _host_has("avx2")


def pack_bfloat16(weight: np.ndarray) -> np.ndarray:
    """An ``(in, out)`` float32 weight rounded to bfloat16 for this CPU's tile: in pairs for AVX-512's
    bfloat16 dot product where the CPU has it, else as values the tile widens to float32."""
    return pack_bfloat16_pairs(weight) if has_bfloat16_dot() else pack_bfloat16_values(weight)


def pack_bfloat16_pairs(weight: np.ndarray) -> np.ndarray:
    """An ``(in, out)`` float32 weight rounded to bfloat16 as int32 ``[panels, 1, ceil(in / 2), 64]``
    (one stripe: only AVX-512 has the product): each holds rows ``2i`` and ``2i + 1`` of a column in
    its low and high half (zero-padded); the rows multiplying it are rounded to bfloat16 too."""
    depth, columns = weight.shape
    padded = np.zeros((-(-columns // PANEL) * PANEL, depth), dtype=np.float32)
    padded[:columns] = weight.T
    pairs = bfloat16_pairs(padded).T  # [ceil(in / 2), padded out]: a column's pairs as a row's
    return np.ascontiguousarray(pairs.reshape(pairs.shape[0], -1, 1, PANEL).transpose(1, 2, 0, 3))


def pack_bias(bias, columns: int) -> np.ndarray:
    """A bias (``None``: zeros) padded to whole panels."""
    padded = np.zeros(-(-columns // PANEL) * PANEL, dtype=np.float32)
    if bias is not None:
        padded[:columns] = bias
    return padded
