"""coil's CUDA kernels against eager PyTorch on the GPU (strict mode: nothing falls back).

Pointwise (contiguous, broadcast, transposed inputs), reductions over several row lengths
(warp-per-row and block-per-row kernels), softmax and layer norm (one kernel each), and the
dtypes float32, bfloat16, float16, int64, int32, bool. Without a GPU the CUDA tests skip
visibly; the last tests check the one-line reason a CUDA graph gets where no driver is present.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

C = pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402

TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
}


def _run(fn, *inputs, options=None):
    torch._dynamo.reset()
    coil.reset_report()
    compiled = torch.compile(fn, backend="coil", options={"strict": True, **(options or {})})
    got = compiled(*inputs)
    rep = coil.report()
    assert rep.graphs_compiled >= 1 and not rep.graphs_fallen_back, str(rep)
    return got, fn(*inputs)


def _check(fn, *inputs, dtype=torch.float32, tol=None):
    got, want = _run(fn, *inputs)
    assert got.device.type == "cuda"
    if dtype.is_floating_point:
        torch.testing.assert_close(got, want, **(tol or TOL[dtype]))
    else:
        assert torch.equal(got, want)


def _randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(1000,), (64, 1024), (3, 333, 7)])
def test_pointwise_chain(dtype, shape):
    x, y = _randn(*shape, dtype=dtype), _randn(*shape, dtype=dtype)
    _check(lambda a, b: torch.sigmoid(a * 2 + b).exp() - torch.tanh(b), x, y, dtype=dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [1024, 1023])
def test_uniform_draws_and_dropout(cols):
    """Uniform draws four elements a thread from one Philox block (cols 1024: the vector entry
    point) or one each (1023: scalar): uniform, uncorrelated between neighbours and between
    two draws of one graph, fresh each call; a dropout's gradient takes the forward's mask."""
    x = torch.ones(512, cols, device="cuda")

    def draws(a):
        return torch.rand_like(a), torch.rand_like(a)

    (u, v), _ = _run(draws, x)
    n = u.numel()
    for t in (u, v):
        assert 0 <= t.min().item() and t.max().item() < 1
        assert abs(t.mean().item() - 0.5) < 5 * (1 / 12 / n) ** 0.5
        assert abs(t.var().item() - 1 / 12) < 1e-3
        hist = torch.histc(t, bins=64, min=0, max=1)
        assert ((hist - n / 64) ** 2 / (n / 64)).sum().item() < 120  # 63 dof
    lag = ((u[:, 1:] - 0.5) * (u[:, :-1] - 0.5)).mean().item()
    assert abs(lag) < 5 / 12 / (u[:, 1:].numel() ** 0.5)
    assert abs(((u - 0.5) * (v - 0.5)).mean().item()) < 5 / 12 / n ** 0.5
    compiled = torch.compile(draws, backend="coil", options={"strict": True})
    assert not torch.equal(compiled(x)[0], compiled(x)[0])

    w = torch.randn(512, cols, device="cuda", requires_grad=True)
    torch._dynamo.reset()
    out = torch.compile(lambda a: F.dropout(a, p=0.3, training=True), backend="coil")(w)
    out.sum().backward()
    kept = out != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.01
    torch.testing.assert_close(out[kept], w.detach()[kept] / 0.7)
    torch.testing.assert_close(w.grad, kept.float() / 0.7)

    # A dropout after a softmax: a row kernel drawing four elements a step (cols 1024).
    torch._dynamo.reset()
    s = torch.compile(lambda a: F.dropout(torch.softmax(a, -1), p=0.3, training=True),
                      backend="coil", options={"strict": True})(w.detach())
    p = torch.softmax(w.detach(), -1)
    kept = s != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.01
    torch.testing.assert_close(s[kept], p[kept] / 0.7)
    lag = ((kept[:, 1:].float() - 0.7) * (kept[:, :-1].float() - 0.7)).mean().item()
    assert abs(lag) < 5 * 0.21 / (kept[:, 1:].numel() ** 0.5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("widths", [(768, 768, 768), (100, 156, 40), (101, 155, 40)])
def test_concatenation_along_inner_dim(dtype, widths):
    """Pieces whose boundaries are multiples of the vector width load a whole vector under one
    mask (emit_pointwise: mask_chunk_width); odd widths stay scalar. Exact either way, also
    with an elementwise op fused after the join."""
    xs = [_randn(64, w, dtype=dtype) for w in widths]
    _check(lambda a, b, c: torch.cat([a, b, c], 1), *xs, dtype=dtype, tol=dict(rtol=0, atol=0))
    _check(lambda a, b, c: torch.cat([a * 2, b, c - 1], 1) + 0.5, *xs, dtype=dtype)


@pytest.mark.gpu
def test_pointwise_broadcast_and_transposed():
    x, b = _randn(256, 384), _randn(384)
    _check(lambda a, c: F.gelu(a + c), x, b)
    t = _randn(384, 256)
    _check(lambda a, c: a + c.t() * 3, x, t)


# Transposed reads take the tiled entry point (32 x 32 tiles through shared memory): ragged
# edges, several transposed inputs (more than the 4 tiles a kernel keeps: the rest read global
# memory), 4-d head splits as attention's k^T, every dtype, large enough to be autotuned.
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("shape", [(33, 65), (1000, 37), (2048, 1024)])
def test_tiled_transpose(dtype, shape):
    def make(*s):
        if dtype == torch.bool:
            return torch.rand(*s, device="cuda") > 0.5
        if dtype == torch.int64:
            return torch.randint(-100, 100, s, device="cuda")
        return _randn(*s, dtype=dtype)

    x, y = make(*shape), make(*shape[::-1])
    if dtype == torch.bool:
        _check(lambda a, b: a.t() ^ b, x, y, dtype=dtype)
    else:
        _check(lambda a, b: a.t() * 2 + b, x, y, dtype=dtype)
        _check(lambda a: a.t().contiguous(), x, dtype=dtype)


@pytest.mark.gpu
def test_tiled_many_transposed_inputs_and_head_split():
    ins = [_randn(96, 200) for _ in range(6)]
    _check(lambda *t: sum(u.t() * (i + 1) for i, u in enumerate(t)), *ins)
    qkv = _randn(4, 70, 3 * 256, dtype=torch.bfloat16)

    def kt(a):
        k = a[..., 256:512].view(4, 70, 4, 64).permute(0, 2, 3, 1)  # [b, h, e, t]
        return k.contiguous() * 0.5

    _check(kt, qkv, dtype=torch.bfloat16)


# A dim merged from two ([batch, seq] into rows) reads the unmerged layout through div and mod:
# attention's head merge takes vectors within runs of the head size (64: 4 or 8 a thread, 6: 2,
# 5: none), and a [batch, hidden, seq] tensor transposed into [batch * seq, hidden] rows takes
# tiles within runs of seq (64: 64-wide tiles for 2-byte elements, 96: 32-wide only).
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("head,seq", [(64, 64), (6, 96), (5, 48)])
def test_merged_dims_read_as_vectors_and_tiles(dtype, head, seq):
    x = _randn(2, 4, seq, head, dtype=dtype)
    _check(lambda a: a.permute(0, 2, 1, 3).reshape(2 * seq, 4 * head) * 0.5, x, dtype=dtype)
    y = _randn(2, 4 * head, seq, dtype=dtype)
    _check(lambda a: a.transpose(1, 2).reshape(2 * seq, 4 * head) * 0.5 + 1, y, dtype=dtype)


@pytest.mark.gpu
def test_pointwise_unaligned_view():
    x = _randn(4097)
    _check(lambda a: (a[1:] * 2).relu(), x)


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [7, 100, 1024, 5000, 70000])
def test_row_sum_and_max(cols):
    x = _randn(33, cols)
    # Sums of up to 70000 terms in another order than eager's: float32 rounding differs.
    _check(lambda a: a.sum(-1), x, tol=dict(rtol=1e-4, atol=1e-3))
    _check(lambda a: a.amax(-1), x)


@pytest.mark.gpu
def test_reduction_over_leading_dim_and_full():
    x = _randn(300, 65)
    _check(lambda a: a.sum(0), x)
    _check(lambda a: (a * a).sum(), x)


# Reductions over rows (bias and LayerNorm-weight gradients) take the column entry point _c:
# C adjacent columns per warp, each column split over the block's lanes. Heuristic launch
# (the _c entry itself) and autotuned; ragged column counts (a block past the last column),
# fewer columns than a warp's C, a softmax over dim 0 (a reduction and a pointwise member),
# arg reductions with ties, bf16 with float accumulation, int64 and bool.
@pytest.mark.gpu
@pytest.mark.parametrize("autotune", [False, True])
@pytest.mark.parametrize("cols", [3, 33, 768])
def test_column_reductions(cols, autotune):
    opts = {"cuda_autotune": autotune}

    def check(fn, *inputs, dtype=torch.float32, tol=None):
        got, want = _run(fn, *inputs, options=opts)
        if dtype.is_floating_point:
            torch.testing.assert_close(got, want, **(tol or TOL[dtype]))
        else:
            got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
            assert all(torch.equal(g, w) for g, w in zip(got, want))

    x, y = _randn(4096, cols), _randn(4096, cols)
    sums = dict(rtol=1e-4, atol=1e-3)
    check(lambda a: a.sum(0), x, tol=sums)
    check(lambda a, b: ((a * b).sum(0), a.sum(0)), x, y, tol=sums)
    check(lambda a: a.view(8, 512, cols).sum([0, 1]), x, tol=sums)
    check(lambda a: torch.softmax(a, 0), x)
    check(lambda a: a.var(0), x, tol=sums)
    ties = torch.randint(0, 4, (4096, cols), device="cuda").float()
    check(lambda a: (a.argmax(0), a.argmin(0)), ties, dtype=torch.int64)
    xb = _randn(4096, cols, dtype=torch.bfloat16)
    check(lambda a: a.sum(0), xb, dtype=torch.bfloat16, tol=dict(rtol=2e-2, atol=5e-1))
    xi = torch.randint(-100, 100, (4096, cols), device="cuda")
    check(lambda a: a.sum(0), xi, dtype=torch.int64)
    check(lambda a: (a > 95).any(0), xi, dtype=torch.bool)


# The vector column entry point _cv (4 f32 or 8 bf16 adjacent columns a thread, one 128-bit
# load each), forced against _c: column counts that are a multiple of its width (36: the
# second block-row redoes the last 4 columns), bf16, and BatchNorm training over a
# channels-last activation, forward and backward, whose max-pool backward (masked loads, read a
# column at a time) leads the gradient's reductions.
@pytest.mark.gpu
@pytest.mark.parametrize("entry", ["_c", "_cv"])
def test_vector_column_entry(entry, tmp_path):
    import copy

    opts = {"cuda_row_entry": entry}
    sums = dict(rtol=1e-4, atol=1e-3)
    for cols in (36, 768):
        x, y = _randn(4096, cols), _randn(4096, cols)
        got, want = _run(lambda a, b: ((a * b).sum(0), a.sum(0)), x, y, options=opts)
        torch.testing.assert_close(got, want, **sums)
        got, want = _run(lambda a: a.var(0), x, options=opts)
        torch.testing.assert_close(got, want, **sums)
    xb = _randn(4096, 64, dtype=torch.bfloat16)
    got, want = _run(lambda a: a.sum(0), xb, options=opts)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=5e-1)

    bn = torch.nn.BatchNorm2d(64).cuda()
    bn_eager = copy.deepcopy(bn)
    # 16 x 28 x 28 values a channel: the statistics split 8 ways (a [8, 64] first stage, _cv).
    x = _randn(16, 64, 28, 28).to(memory_format=torch.channels_last)
    torch._dynamo.reset()
    compiled = torch.compile(lambda a: F.max_pool2d(torch.relu(bn(a)), 3, 2, 1), backend="coil",
                             options={"strict": True, "debug_dir": str(tmp_path), **opts})
    xa, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = compiled(xa)
    want = F.max_pool2d(torch.relu(bn_eager(xe)), 3, 2, 1)
    g = torch.randn_like(want)
    out.backward(g)
    want.backward(g)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(xa.grad, xe.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(bn.weight.grad, bn_eager.weight.grad, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(bn.running_var, bn_eager.running_var, rtol=1e-5, atol=1e-5)
    kernels = "".join(f.read_text() for f in tmp_path.rglob("05_kernels.cpp"))
    assert "_cv(" in kernels and "_c(" in kernels


@pytest.mark.gpu
def test_argmax_and_mean_bf16():
    x = _randn(40, 3000)
    _check(lambda a: a.argmax(-1), x, dtype=torch.int64)
    xb = _randn(40, 3000, dtype=torch.bfloat16)
    _check(lambda a: a.mean(-1), xb, dtype=torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cols", [64, 1000, 8192])
def test_softmax_one_kernel(dtype, cols):
    x = _randn(128, cols, dtype=dtype)
    got, want = _run(lambda a: torch.softmax(a, -1), x)
    torch.testing.assert_close(got, want, **TOL[dtype])


@pytest.mark.gpu
@pytest.mark.parametrize("online", [False, True])
@pytest.mark.parametrize("cols", [1001, 4096, 12289])
def test_softmax_special_values(cols, online):
    # Three passes, or the max and the sum of exp(x - max) in one (option cuda_online_softmax,
    # emit_rows.cpp: emit_online_max_sum): large values (exp overflows without the max), -inf
    # (causal masks), rows of only -inf (NaN, as eager), +inf and NaN entries; 1001 columns
    # take the scalar entry points, 4096 the vector ones, 12289 rows too long for the row cache.
    x = _randn(64, cols) * 100
    x[1, ::3] = float("-inf")
    x[2, :] = float("-inf")
    x[3, 5] = float("inf")
    x[4, 7] = float("nan")
    x[5, :] = -1e30
    for fn in (lambda a: torch.softmax(a, -1), lambda a: torch.log_softmax(a, -1)):
        got, want = _run(fn, x, options={"cuda_online_softmax": online})
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,cols", [(torch.float32, 4096), (torch.float32, 50257),
                                        (torch.bfloat16, 4096), (torch.bfloat16, 1001)])
def test_stored_row_and_its_reductions_in_one_loop(dtype, cols):
    # The contiguous copy of a slice and the reductions over it run in one loop (emit_rows.cpp:
    # pointwise_reductions_end), the reductions taking the stored elements from registers: they
    # must see them as stored (bf16-rounded), and the copy must be complete for the later pass
    # (logsumexp's sum of exp reads it back). Rows of 50257 as GPT-2's logits.
    x = _randn(48, cols + 1, dtype=dtype)

    def fn(a):
        y = a[:, 1:].contiguous() * 3
        return y, y.amax(-1), y.float().sum(-1), torch.logsumexp(y.float(), -1)

    got, want = _run(fn, x)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
    torch.testing.assert_close(got[2], want[2], rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(got[3], want[3], rtol=1e-5, atol=1e-5)


# Every row entry point, forced (option cuda_row_entry), on softmax (the exp left in the row
# cache), LayerNorm (two cached inputs' worth of passes) and log-softmax with special values:
# _br keeps the row in registers in a block of a fixed size, ragged where the steps do not
# fill it (1000 columns: 250 steps over 256 threads); 8192 as the benchmark's softmax.
@pytest.mark.gpu
@pytest.mark.parametrize("entry", ["_b", "_wv", "_bv", "_br"])
@pytest.mark.parametrize("dtype,cols", [(torch.float32, 1000), (torch.float32, 8192),
                                        (torch.bfloat16, 4096), (torch.float16, 2048)])
def test_row_entry_points(entry, dtype, cols):
    x = _randn(67, cols, dtype=dtype) * 4
    x[1, ::3] = float("-inf")
    w, b = _randn(cols, dtype=dtype), _randn(cols, dtype=dtype)
    opts = {"cuda_row_entry": entry}
    tol = TOL[dtype]
    got, want = _run(lambda a: torch.softmax(a, -1), x, options=opts)
    torch.testing.assert_close(got, want, **tol)
    got, want = _run(lambda a: torch.log_softmax(a.float(), -1), x, options=opts)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    y = x.nan_to_num(neginf=0.0)
    got, want = _run(lambda a, ww, bb: F.layer_norm(a, (cols,), ww, bb), y, w, b, options=opts)
    torch.testing.assert_close(got, want, **tol)


@pytest.mark.gpu
def test_softmax_unaligned_rows_take_scalar_entries():
    x = _randn(64 * 1024 + 1)
    got, want = _run(lambda a: torch.softmax(a[1:].view(64, 1024), -1), x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm(dtype):
    x = _randn(256, 768, dtype=dtype)
    w, b = _randn(768, dtype=dtype), _randn(768, dtype=dtype)
    _check(lambda a, ww, bb: F.layer_norm(a, (768,), ww, bb), x, w, b, dtype=dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_ops(dtype):
    x = torch.randint(-50, 50, (77, 130), device="cuda", dtype=dtype)
    y = torch.randint(1, 9, (77, 130), device="cuda", dtype=dtype)
    _check(lambda a, b: a * 3 + torch.div(a, b, rounding_mode="floor") + a % b, x, y, dtype=dtype)
    _check(lambda a: a.sum(-1), x, dtype=torch.int64)


@pytest.mark.gpu
def test_bool_ops():
    x, y = _randn(100, 50), _randn(100, 50)
    _check(lambda a, b: (a > 0) & (b < 0.5) | (a > b), x, y, dtype=torch.bool)
    _check(lambda a: torch.where(a > 0, a, a * 0.1), x)
    _check(lambda a: (a > 0).any(-1), x, dtype=torch.bool)


@pytest.mark.gpu
def test_matmul_on_gpu():
    a, b, bias = _randn(64, 128), _randn(128, 96), _randn(96)
    got, want = _run(lambda x, y, z: torch.relu(x @ y + z), a, b, bias)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)


_DT = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_addmm_runs_on_cublaslt_with_bias_epilogue(dtype):
    import coil.cuda as cc

    t = _DT[dtype]
    text = (f"graph(%0: {t}[64, 128]@cuda, %1: {t}[96, 128]@cuda, %2: {t}[96]@cuda):\n"
            f"  %3: {t}[128, 96]{{1, 128}}@cuda = aten.permute.default(%1, [1, 0])\n"
            f"  %4: {t}[64, 96]@cuda = aten.addmm.default(%2, %0, %3)\n"
            f"  return (%4)\n")
    g = C.compile(text, {"cache_dir": "", **cc.compile_options()}, None)
    assert "extern addmm aten.addmm.default (library)" in g.describe(), g.describe()
    a, w, b = _randn(64, 128, dtype=dtype), _randn(96, 128, dtype=dtype), _randn(96, dtype=dtype)
    (out,) = g.run([a, w, b], **cc.run_kwargs())
    tol = dict(rtol=1e-3, atol=1e-3) if dtype == torch.float32 else TOL[dtype]
    torch.testing.assert_close(out, torch.addmm(b, a, w.t()), **(tol if dtype != torch.float16 else dict(rtol=1e-2, atol=1e-2)))


# Products with a dimension that is not a multiple of 16 bytes (GPT-2's 50257-word vocabulary)
# run on zero-padded operand copies (src/runtime/cuda_matmul.cpp); each case is big enough
# (>= 2^31 multiply-adds) to take that path: odd N with a bias, odd K, odd M read column-major.
_ODD = {
    "odd_n_bias": (lambda x, w, b: F.linear(x, w, b), ((4096, 1024), (1001, 1024), (1001,))),
    "odd_k": (lambda x, w: F.linear(x, w), ((4096, 1001), (1024, 1001))),
    "odd_m_transposed": (lambda g, x: g.t() @ x, ((4096, 1001), (4096, 1024))),
}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(_ODD))
def test_matmul_with_odd_dimensions(case, dtype):
    fn, shapes = _ODD[case]
    inputs = [_randn(*s, dtype=dtype) for s in shapes]
    got, want = _run(fn, *inputs)
    assert got.shape == want.shape
    # Scale: sums of ~1000-4000 unit products; bf16 rounds each output to 8 bits.
    tol = dict(rtol=1e-3, atol=1e-2) if dtype == torch.float32 else dict(rtol=2e-2, atol=0.5)
    torch.testing.assert_close(got.float(), want.float(), **tol)


# A CUDA mm with such an N gets a product buffer of N_pad columns (src/lower/linalg.cpp):
# cuBLASLt writes it in place, consumers read the [:, :N] window, and a graph output keeps the
# padded row stride (as Inductor returns it) instead of being copied out.
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mm_with_odd_n_keeps_padded_rows(dtype):
    # Scaled so the softmax below is not one-hot (bf16 logits rounded apart would then differ).
    x, w = _randn(4096, 1024, dtype=dtype) * 0.03, _randn(1001, 1024, dtype=dtype)
    per = 16 // x.element_size()
    tol = dict(rtol=1e-3, atol=1e-2) if dtype == torch.float32 else dict(rtol=2e-2, atol=0.5)
    got, want = _run(lambda a, b: F.linear(a, b), x, w)
    assert got.shape == want.shape and got.stride() == ((1001 + per - 1) // per * per, 1)
    torch.testing.assert_close(got.float(), want.float(), **tol)
    # Read by a fused consumer (a row softmax) and returned beside it.
    got2, want2 = _run(lambda a, b: (lambda y: (y, torch.softmax(y.float(), -1)))(a @ b.t()), x, w)
    torch.testing.assert_close(got2[0].float(), want2[0].float(), **tol)
    torch.testing.assert_close(got2[1], want2[1], rtol=2e-2, atol=2e-3)


# A computed operand with unaligned columns that products read (the LM head's logits
# gradient, [tokens, vocab]) is realized into a zero-padded buffer (src/lower/linalg.cpp), and
# both products of the backward (grad @ W, grad^T @ x) read it padded in place: the same
# numbers as eager, and the gradients of the padded columns' neighbours untouched.
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_products_read_zero_padded_operands(dtype, tmp_path):
    x = _randn(4096, 1024, dtype=dtype) * 0.03
    w = _randn(1025, 1024, dtype=dtype)
    target = torch.randint(0, 1025, (4096,), device="cuda")

    def fwd_bwd(a, b, t):
        a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
        return torch.autograd.grad(F.cross_entropy((a @ b.t()).float(), t), (a, b))

    torch._dynamo.reset()
    coil.reset_report()
    a, b = x.clone().requires_grad_(), w.clone().requires_grad_()
    compiled = torch.compile(lambda p, q, t: F.cross_entropy((p @ q.t()).float(), t),
                             backend="coil",
                             options={"strict": True, "debug": True, "debug_dir": str(tmp_path)})
    compiled(a, b, target).backward()
    rep = coil.report()
    assert rep.graphs_compiled >= 2 and not rep.graphs_fallen_back, str(rep)
    backward = "".join(p.read_text() for p in tmp_path.glob("*backward*/02_loop_program.txt"))
    in_place = [ln for ln in backward.splitlines() if "extern mm" in ln and "ints [0, 0, 1]" in ln]
    assert len(in_place) == 2, backward
    want = fwd_bwd(x, w, target)
    tol = dict(rtol=1e-3, atol=1e-5) if dtype == torch.float32 else dict(rtol=3e-2, atol=1e-3)
    torch.testing.assert_close(a.grad.float(), want[0].float(), **tol)
    torch.testing.assert_close(b.grad.float(), want[1].float(), **tol)


# ReLU / GELU applied to a Linear's output run in cuBLASLt's epilogue (src/lower/linalg.cpp):
# the product is stored activated and no kernel runs. cuBLASLt's GELU is the tanh form: an
# exact (erf) GELU is fused only in bf16; in f32 it stays a kernel.
_EPILOGUE = {
    "relu_bias_f32": (lambda x, w, b: torch.relu(F.linear(x, w, b)), torch.float32, True),
    "relu_nobias_bf16": (lambda x, w, b: torch.relu(x @ w.t()), torch.bfloat16, True),
    "gelu_tanh_f32": (lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"),
                      torch.float32, True),
    "gelu_erf_bf16": (lambda x, w, b: F.gelu(F.linear(x, w, b)), torch.bfloat16, True),
    "gelu_erf_f32": (lambda x, w, b: F.gelu(F.linear(x, w, b)), torch.float32, False),
    "relu_also_read_raw": (lambda x, w, b: (lambda y: (torch.relu(y), y * 2))(F.linear(x, w, b)),
                           torch.float32, False),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(_EPILOGUE))
def test_linear_activation_runs_in_the_cublaslt_epilogue(case, tmp_path):
    fn, dtype, fused = _EPILOGUE[case]
    x = _randn(3, 128, 256, dtype=dtype)
    w, b = _randn(512, 256, dtype=dtype) * 0.1, _randn(512, dtype=dtype)
    got, want = _run(fn, x, w, b, options={"debug_dir": str(tmp_path)})
    tol = dict(rtol=1e-3, atol=2e-3) if dtype == torch.float32 else dict(rtol=2e-2, atol=3e-2)
    torch.testing.assert_close(got, want, **tol)
    program = next(tmp_path.glob("*/02_loop_program.txt")).read_text()
    mm = [ln for ln in program.splitlines() if "extern" in ln and "mm" in ln]
    assert mm, program
    assert (("ints [1, 0]" in mm[0] or "ints [2, 0]" in mm[0]) == fused), program
    if fused:
        assert "kernel" not in next(tmp_path.glob("*/03_schedule.txt")).read_text()


@pytest.mark.gpu
def test_bmm_transposed_operands():
    q, k = _randn(6, 32, 16), _randn(6, 48, 16)
    got, want = _run(lambda x, y: torch.softmax(x @ y.transpose(1, 2), -1), q, k)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)


def test_no_gpu_gives_a_one_line_reason():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the reason is empty")
    why = C.cuda_unavailable_reason({})
    assert why and "\n" not in why, why
    text = "graph(%0: f32[4]@cuda):\n  %1: f32[4]@cuda = aten.exp.default(%0)\n  return (%1)\n"
    with pytest.raises(C.CompileError, match="no CUDA backend"):
        C.compile(text, {"cache_dir": ""}, None)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fast_math_in_float32_kernels():
    """Option cuda_fast_math_f32: float32 kernels take the approximate exp, sigmoid, division
    and reciprocal square root (as Triton's kernels do in every dtype); a few ulp of float,
    within float32's tolerance, with infinities and NaN kept."""
    x = _randn(64, 1000) * 8
    x[0, :4] = torch.tensor([float("inf"), float("-inf"), float("nan"), -100.0])
    v = torch.rand(1000, device="cuda") + 0.1

    def f(x, v):
        return (F.silu(x), torch.softmax(x, -1), torch.sigmoid(x) / (x.abs() + 1),
                x * torch.reciprocal(torch.sqrt(v + 1e-5)))

    got, want = _run(f, x, v, options={"cuda_fast_math_f32": True})
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=2e-5, atol=1e-6, equal_nan=True)
