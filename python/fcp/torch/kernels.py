"""Block attention kernels (one block = one query tile x one key/value tile)
that return the log-sum-exp, and the choice among them."""

from __future__ import annotations

import warnings
from typing import Optional

import torch

try:  # flash-attn's varlen kernel, when installed (CUDA, fp16/bf16)
    from flash_attn import flash_attn_varlen_func as _flash_varlen
except ImportError:  # pragma: no cover - depends on the environment
    _flash_varlen = None

# Every kernel takes q (B, H, Sq, D), k (B, Hkv, Sk, D), v (B, Hkv, Sk, Dv)
# with Hkv dividing H (see _Kernel for grouped-query attention), a causal flag
# meaning the
# top-left-aligned mask of a square diagonal block (row r sees columns <= r),
# and returns the block's output and its log-sum-exp (B, H, Sq) in the
# accumulation dtype. Backward takes the *final* (merged) output and
# log-sum-exp of the rows: then P = exp(S - lse) is the true global softmax
# restricted to the block, so block gradients add up to the exact ones.


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _rows_heads_layout(t):
    """``t`` (B, H, S, D) with (B, S, H, D) memory order, as the CUDA
    memory-efficient and cuDNN backward kernels read their output and its
    gradient whatever the strides say."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def _expand_heads(t, group):
    return t if group == 1 else t.repeat_interleave(group, dim=1)


def _reduce_heads(t, group):
    if group == 1:
        return t
    b, h, n, d = t.shape
    return t.view(b, h // group, group, n, d).sum(dim=2)


class _Kernel:
    """Grouped-query attention for every kernel: K/V come with their own head
    count; kernels without native GQA get them expanded (query head h uses
    key/value head h // group) and their dK/dV summed back."""

    def native_gqa(self, dtype) -> bool:
        return False

    def forward(self, q, k, v, causal, scale):
        group = 1 if self.native_gqa(q.dtype) else q.shape[1] // k.shape[1]
        return self._forward(q, _expand_heads(k, group), _expand_heads(v, group), causal, scale)

    def backward(self, dout, q, k, v, out, lse, causal, scale):
        group = 1 if self.native_gqa(q.dtype) else q.shape[1] // k.shape[1]
        dq, dk, dv = self._backward(
            dout, q, _expand_heads(k, group), _expand_heads(v, group), out, lse, causal, scale
        )
        return dq, _reduce_heads(dk, group), _reduce_heads(dv, group)


class _ChunkedKernel(_Kernel):
    """Plain PyTorch: query and key tiles of ``chunk`` rows, online softmax in
    the accumulation dtype. Memory O(chunk^2) per head."""

    name = "chunked"

    def __init__(self, chunk: int = 512):
        self.chunk = int(chunk)

    def _tiles(self, n):
        return [(a, min(a + self.chunk, n)) for a in range(0, n, self.chunk)]

    def _forward(self, q, k, v, causal, scale):
        acc = _acc_dtype(q.dtype)
        sq = q.shape[-2]
        out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=acc, device=q.device)
        lse = torch.empty(q.shape[:-1], dtype=acc, device=q.device)
        for q0, q1 in self._tiles(sq):
            qt = q[..., q0:q1, :].to(acc)
            o = torch.zeros(*qt.shape[:-1], v.shape[-1], dtype=acc, device=q.device)
            m = torch.full(qt.shape[:-1], float("-inf"), dtype=acc, device=q.device)
            s = torch.zeros(qt.shape[:-1], dtype=acc, device=q.device)
            for k0, k1 in self._tiles(q1 if causal else k.shape[-2]):
                scores = torch.matmul(qt, k[..., k0:k1, :].to(acc).transpose(-1, -2)) * scale
                if causal and k1 > q0:
                    rows = torch.arange(q0, q1, device=q.device)[:, None]
                    cols = torch.arange(k0, k1, device=q.device)[None, :]
                    scores = scores.masked_fill(cols > rows, float("-inf"))
                new_m = torch.maximum(m, scores.amax(dim=-1))
                p = torch.exp(scores - new_m[..., None])
                alpha = torch.exp(m - new_m)
                s = s * alpha + p.sum(dim=-1)
                o = o * alpha[..., None] + torch.matmul(p, v[..., k0:k1, :].to(acc))
                m = new_m
            out[..., q0:q1, :] = o / s[..., None]
            lse[..., q0:q1] = m + torch.log(s)
        return out, lse

    def _backward(self, dout, q, k, v, out, lse, causal, scale):
        acc = _acc_dtype(q.dtype)
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        dk = torch.zeros(k.shape, dtype=acc, device=q.device)
        dv = torch.zeros(v.shape, dtype=acc, device=q.device)
        for q0, q1 in self._tiles(q.shape[-2]):
            qt = q[..., q0:q1, :].to(acc)
            do = dout[..., q0:q1, :].to(acc)
            delta = (do * out[..., q0:q1, :].to(acc)).sum(dim=-1)
            lt = lse[..., q0:q1].to(acc)
            for k0, k1 in self._tiles(q1 if causal else k.shape[-2]):
                kt = k[..., k0:k1, :].to(acc)
                vt = v[..., k0:k1, :].to(acc)
                scores = torch.matmul(qt, kt.transpose(-1, -2)) * scale
                if causal and k1 > q0:
                    rows = torch.arange(q0, q1, device=q.device)[:, None]
                    cols = torch.arange(k0, k1, device=q.device)[None, :]
                    scores = scores.masked_fill(cols > rows, float("-inf"))
                p = torch.exp(scores - lt[..., None])
                dv[..., k0:k1, :] += torch.matmul(p.transpose(-1, -2), do)
                ds = p * (torch.matmul(do, vt.transpose(-1, -2)) - delta[..., None])
                dq[..., q0:q1, :] += torch.matmul(ds, kt) * scale
                dk[..., k0:k1, :] += torch.matmul(ds.transpose(-1, -2), qt) * scale
        return dq, dk, dv


class _CpuFlashKernel(_Kernel):
    """``aten::_scaled_dot_product_flash_attention_for_cpu`` (+ its backward):
    PyTorch's tiled CPU flash attention, fp32 accumulation inside."""

    name = "cpu_flash"

    def native_gqa(self, dtype) -> bool:
        # K/V with fewer heads natively (less memory); but for bf16/fp16 it
        # sums a group's dK/dV in the input dtype (3x the error): expanded.
        return dtype in (torch.float32, torch.float64)

    @staticmethod
    def available(device, dtype) -> bool:
        return (
            device.type == "cpu"
            and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")
            and dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16)
        )

    def _forward(self, q, k, v, causal, scale):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, causal, scale=scale
        )
        return out, lse.to(_acc_dtype(q.dtype))

    def _backward(self, dout, q, k, v, out, lse, causal, scale):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dout, q, k, v, out, lse, 0.0, causal, scale=scale
        )


class _CudaFlashKernel(_Kernel):
    """``aten::_scaled_dot_product_flash_attention`` (FlashAttention-2 in
    PyTorch; fp16/bf16, head_dim a multiple of 8 up to 256)."""

    name = "cuda_flash"

    @staticmethod
    def available(device, dtype, head_dim) -> bool:
        return (
            device.type == "cuda"
            and dtype in (torch.float16, torch.bfloat16)
            and head_dim % 8 == 0
            and head_dim <= 256
        )

    def _forward(self, q, k, v, causal, scale):
        res = torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, 0.0, causal, False, scale=scale
        )
        # RNG state: unused without dropout, but the backward asks for it.
        self._rng = (res[6], res[7])
        return res[0], res[1].float()

    def _backward(self, dout, q, k, v, out, lse, causal, scale):
        seed, offset = getattr(
            self, "_rng", (torch.empty((), dtype=torch.int64, device=q.device),) * 2
        )
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            dout,
            q,
            k,
            v,
            out,
            lse.contiguous(),
            None,
            None,
            q.shape[-2],
            k.shape[-2],
            0.0,
            causal,
            seed,
            offset,
            scale=scale,
        )
        return dq, dk, dv


class _CudaEfficientKernel(_Kernel):
    """``aten::_scaled_dot_product_efficient_attention`` (memory-efficient
    attention; fp32 too). Its log-sum-exp may be padded to a multiple of 32
    rows: trimmed on the way out, padded again for the backward. Its fp16/bf16
    backward reads the output as (batch, rows, heads, dim) in memory whatever
    the strides say (measured on an H200, torch 2.11: a (batch, heads, rows,
    dim)-contiguous output gave wrong dQ/dK and illegal memory accesses), so
    the output and its gradient are handed over in that layout."""

    name = "cuda_efficient"

    @staticmethod
    def available(device, dtype, head_dim) -> bool:
        return device.type == "cuda" and dtype in (torch.float32, torch.float16, torch.bfloat16)

    def _forward(self, q, k, v, causal, scale):
        out, lse, seed, offset = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, None, True, 0.0, causal, scale=scale
        )
        self._rng = (seed, offset)
        return out, lse[..., : q.shape[-2]].float()

    def _backward(self, dout, q, k, v, out, lse, causal, scale):
        rows = (q.shape[-2] + 31) // 32 * 32  # the forward's padded length for these rows
        if rows > lse.shape[-1]:
            lse = torch.nn.functional.pad(lse, (0, rows - lse.shape[-1]))
        seed, offset = getattr(
            self, "_rng", (torch.empty((), dtype=torch.int64, device=q.device),) * 2
        )
        out, dout = _rows_heads_layout(out), _rows_heads_layout(dout)
        dq, dk, dv, _ = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
            dout,
            q,
            k,
            v,
            None,
            out,
            lse.contiguous(),
            seed,
            offset,
            0.0,
            [True, True, True, False],
            causal,
            scale=scale,
        )
        return dq, dk, dv


class _CudnnKernel(_Kernel):
    """``aten::_scaled_dot_product_cudnn_attention`` (cuDNN's fused flash
    attention; fp16/bf16). On Hopper it is the fastest of PyTorch's kernels
    (it is what ``scaled_dot_product_attention`` picks there). Output and
    output gradient go to the backward in the forward's (batch, rows, heads,
    dim) memory layout, as for the memory-efficient kernel."""

    name = "cuda_cudnn"

    @staticmethod
    def available(device, dtype, head_dim) -> bool:
        return (
            device.type == "cuda"
            and dtype in (torch.float16, torch.bfloat16)
            and head_dim % 8 == 0
            and head_dim <= 128
            and hasattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention")
            and torch.backends.cudnn.is_available()
        )

    def _forward(self, q, k, v, causal, scale):
        res = torch.ops.aten._scaled_dot_product_cudnn_attention(
            q, k, v, None, True, 0.0, causal, False, scale=scale
        )
        self._aux = (res[2], res[3], res[4], res[5], res[6], res[7])
        return res[0], res[1].reshape(q.shape[:-1]).float()

    def _backward(self, dout, q, k, v, out, lse, causal, scale):
        empty = torch.empty(0, device=q.device)
        zero = torch.zeros((), dtype=torch.int64, device=q.device)
        cum_q, cum_k, _, _, seed, offset = getattr(self, "_aux", (empty, empty, 0, 0, zero, zero))
        out, dout = _rows_heads_layout(out), _rows_heads_layout(dout)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
            dout,
            q,
            k,
            v,
            out,
            lse.reshape(*lse.shape, 1).contiguous(),
            seed,
            offset,
            None,
            cum_q,
            cum_k,
            q.shape[-2],
            k.shape[-2],
            0.0,
            causal,
            scale=scale,
        )
        return dq, dk, dv


class _CudaBySizeKernel:
    """``kernel="auto"`` on CUDA for fp16/bf16: cuDNN for blocks of at least
    ``min_cudnn_rows`` query and key rows, FlashAttention-2 below. Measured on
    an H200 (bf16, 32/8 heads x 128, fwd+bwd; docs/python.md): cuDNN is 1.7x
    faster at 32k-row blocks and 1.4x at 4k-row blocks, but 1.4x slower at
    1k-row blocks, where its per-call overhead dominates. Each call picks by
    its own block; any kernel's backward is exact given the merged output and
    log-sum-exp, so forward and backward need not agree."""

    def __init__(self, min_cudnn_rows: int = 2048):
        self.min_cudnn_rows = min_cudnn_rows
        self.cudnn, self.flash = _CudnnKernel(), _CudaFlashKernel()
        self.name = "cudnn+flash"

    def _pick(self, q, k):
        return self.cudnn if min(q.shape[-2], k.shape[-2]) >= self.min_cudnn_rows else self.flash

    def forward(self, q, k, v, causal, scale):
        return self._pick(q, k).forward(q, k, v, causal, scale)

    def backward(self, dout, q, k, v, out, lse, causal, scale):
        return self._pick(q, k).backward(dout, q, k, v, out, lse, causal, scale)


class _VarlenKernel:
    """A block kernel that also runs all pieces of a ring step in one varlen
    call (``varlen = True``; ring.py gathers the pieces' rows and columns into
    flash-attn's THD layout, ``(tokens, heads, head_dim)`` with cumulative
    lengths). ``forward_varlen`` returns the output and the log-sum-exp
    ``(heads, tokens)``; ``backward_varlen`` takes the merged output and
    log-sum-exp (as every block kernel's backward does). ``blocks``: the
    kernel for single pieces (unpacked calls). ``backend``: ``"flash_attn"``
    (flash-attn's ``flash_attn_varlen_func`` and its backward) or ``"aten"``
    (PyTorch's own varlen FlashAttention-2, ``aten::_flash_attention_forward``
    with cumulative lengths). CUDA, fp16/bf16. A backend whose log-sum-exp
    comes in another layout raises NotImplementedError (the guard then runs
    the pieces one by one): the backward must get the layout the forward gave.
    """

    varlen = True

    def __init__(self, blocks, backend: str):
        self.blocks, self.backend = blocks, backend
        self.name = {"flash_attn": "flash_attn_varlen", "aten": "cuda_flash_varlen"}[backend]

    def forward(self, *args):
        return self.blocks.forward(*args)

    def backward(self, *args):
        return self.blocks.backward(*args)

    def forward_varlen(self, q, k, v, cu_q, cu_k, max_q, max_k, causal, scale):
        if self.backend == "flash_attn":
            out, lse, _ = _flash_varlen(
                q, k, v, cu_q, cu_k, max_q, max_k, 0.0, scale, causal, return_attn_probs=True
            )
        else:
            out, lse, self._rng, self._unused, _ = torch.ops.aten._flash_attention_forward(
                q, k, v, cu_q, cu_k, max_q, max_k, 0.0, causal, False, scale=scale
            )
        if tuple(lse.shape) != (q.shape[1], q.shape[0]):
            raise NotImplementedError(
                f"{self.name}: log-sum-exp of shape {tuple(lse.shape)}, not (heads, tokens)"
            )
        return out, lse.float()

    def backward_varlen(self, dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, causal, scale):
        if self.backend == "flash_attn":
            return _flash_varlen_backward(
                dout, q, k, v, out, lse.float(), cu_q, cu_k, max_q, max_k, causal, scale
            )
        zero = torch.zeros((), dtype=torch.int64, device=q.device)
        return torch.ops.aten._flash_attention_backward(
            dout,
            q,
            k,
            v,
            out,
            lse.float().contiguous(),
            cu_q,
            cu_k,
            max_q,
            max_k,
            0.0,
            causal,
            getattr(self, "_rng", zero),
            getattr(self, "_unused", zero),
            scale=scale,
        )


def _flash_varlen_backward(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, causal, scale):
    """flash-attn's varlen backward, its arguments passed by name: their
    list changed across flash-attn 2.x releases (window_size, softcap...)."""
    import inspect

    from flash_attn import flash_attn_interface as fai

    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    given = {
        "dout": dout,
        "q": q,
        "k": k,
        "v": v,
        "out": out,
        "softmax_lse": lse,
        "dq": dq,
        "dk": dk,
        "dv": dv,
        "cu_seqlens_q": cu_q,
        "cu_seqlens_k": cu_k,
        "max_seqlen_q": max_q,
        "max_seqlen_k": max_k,
        "dropout_p": 0.0,
        "softmax_scale": scale,
        "causal": causal,
        "window_size": (-1, -1),
        "window_size_left": -1,
        "window_size_right": -1,
        "softcap": 0.0,
        "alibi_slopes": None,
        "deterministic": False,
        "rng_state": None,
    }
    fn = fai._flash_attn_varlen_backward
    params = inspect.signature(fn).parameters
    fn(**{name: given[name] for name in params if name in given})
    return dq, dk, dv


def _varlen_available(backend: str, device, dtype, head_dim) -> bool:
    if not _CudaFlashKernel.available(device, dtype, head_dim):
        return False
    if backend == "flash_attn":
        return _flash_varlen is not None
    return hasattr(torch.ops.aten, "_flash_attention_forward")


KERNELS = (
    "auto",
    "cpu_flash",
    "cuda_cudnn",
    "cuda_flash",
    "cuda_efficient",
    "flash_attn_varlen",
    "cuda_flash_varlen",
    "chunked",
)


class _GuardedKernel:
    """``kernel="auto"``: PyTorch's kernel, and the chunked fallback for the
    rest of the call (with one warning per kernel and error) when PyTorch's
    refuses a shape or build. Mixing is exact: any kernel's backward is
    correct given the merged output and log-sum-exp. A varlen primary that
    fails stops being varlen: the pieces then run one by one, through its
    block kernel (itself guarded)."""

    _warned = set()

    def __init__(self, primary):
        self.primary = primary
        self.fallback = None
        self.name = primary.name
        self.varlen = getattr(primary, "varlen", False)

    def _varlen(self, method, *args):
        try:
            return getattr(self.primary, method)(*args)
        except (RuntimeError, NotImplementedError) as e:
            self._warn(method, e)
            self.varlen = False
            self.name = f"{self.primary.name}->per piece"
            raise _VarlenRefused() from e

    def forward_varlen(self, *args):
        return self._varlen("forward_varlen", *args)

    def backward_varlen(self, *args):
        return self._varlen("backward_varlen", *args)

    def _warn(self, method, e):
        key = (self.primary.name, type(e).__name__, str(e).split("\n")[0][:200])
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(
                f"fcp.torch: {self.primary.name} {method} failed ({key[2]}); "
                f"using {'one call per piece' if 'varlen' in method else 'the chunked kernel'}",
                RuntimeWarning,
                stacklevel=3,
            )

    def _run(self, method, *args):
        if self.fallback is None:
            try:
                return getattr(self.primary, method)(*args)
            except (RuntimeError, NotImplementedError) as e:
                self._warn(method, e)
                self.fallback = _ChunkedKernel()
                self.name = f"{self.primary.name}->chunked"
        return getattr(self.fallback, method)(*args)

    def forward(self, *args):
        return self._run("forward", *args)

    def backward(self, *args):
        return self._run("backward", *args)


class _VarlenRefused(Exception):
    """A guarded varlen kernel failed: run this step's pieces one by one."""


def _cuda_blocks(device, dtype, head_dim: int):
    """``"auto"``'s kernel for single pieces off CPU: cuDNN + flash by block
    size, else flash, else memory-efficient, else the chunked kernel."""
    if _CudnnKernel.available(device, dtype, head_dim) and _CudaFlashKernel.available(
        device, dtype, head_dim
    ):
        return _GuardedKernel(_CudaBySizeKernel())
    if _CudaFlashKernel.available(device, dtype, head_dim):
        return _GuardedKernel(_CudaFlashKernel())
    if _CudaEfficientKernel.available(device, dtype, head_dim):
        return _GuardedKernel(_CudaEfficientKernel())
    return _ChunkedKernel()


def _select_kernel(name, device, dtype, head_dim: int):
    if not isinstance(name, str) and hasattr(name, "forward") and hasattr(name, "backward"):
        return name  # a kernel object (tests pass a small-tile chunked kernel)
    if name not in KERNELS:
        raise ValueError(f"kernel: must be one of {', '.join(KERNELS)}, got {name!r}")
    if name in ("flash_attn_varlen", "cuda_flash_varlen"):
        backend = "flash_attn" if name == "flash_attn_varlen" else "aten"
        if not _varlen_available(backend, device, dtype, head_dim):
            raise ValueError(
                f"kernel: {name} needs CUDA, fp16/bf16, head_dim a multiple of 8 up to 256"
                + (" and flash-attn installed" if backend == "flash_attn" else "")
            )
        return _GuardedKernel(_VarlenKernel(_GuardedKernel(_CudaFlashKernel()), backend))
    if name == "auto":
        if _CpuFlashKernel.available(device, dtype):
            return _GuardedKernel(_CpuFlashKernel())
        blocks = _cuda_blocks(device, dtype, head_dim)
        if _varlen_available("flash_attn", device, dtype, head_dim):
            # One flash-attn varlen call per ring step (pieces of all sequences).
            return _GuardedKernel(_VarlenKernel(blocks, "flash_attn"))
        return blocks
    return {
        "cpu_flash": _CpuFlashKernel,
        "cuda_cudnn": _CudnnKernel,
        "cuda_flash": _CudaFlashKernel,
        "cuda_efficient": _CudaEfficientKernel,
        "chunked": _ChunkedKernel,
    }[name]()


def block_kernel_name(q: torch.Tensor, kernel: str = "auto") -> str:
    """Name of the block kernel :func:`ring_attention` uses for ``q``."""
    return _select_kernel(kernel, q.device, q.dtype, q.shape[-1]).name


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = True,
    softmax_scale: Optional[float] = None,
) -> torch.Tensor:
    """Single-process ``torch.nn.functional.scaled_dot_product_attention`` on
    ``(..., heads, s, head_dim)`` with grouped-query K/V expanded: the oracle
    of the tests (an independent implementation: PyTorch's own)."""
    if k.dim() >= 3 and q.shape[-3] != k.shape[-3]:
        group = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(group, dim=-3)
        v = v.repeat_interleave(group, dim=-3)
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=causal, scale=softmax_scale
    )


def exact_attention(q, k, v, cu, causal: bool, scale: float, cu_tensor=None):
    """Attention per sequence on whole sequences (B, H, N, D): flash-attn's
    varlen kernel in one call when installed (CUDA, fp16/bf16, B == 1), else
    PyTorch's scaled_dot_product_attention per sequence. ``cu_tensor``: ``cu``
    as an int32 tensor on q's device, made once per micro-batch by the caller
    (made here when None)."""
    if (
        _flash_varlen is not None
        and q.is_cuda
        and q.dtype in (torch.float16, torch.bfloat16)
        and q.shape[0] == 1
    ):
        cu_t = (
            cu_tensor
            if cu_tensor is not None
            else torch.tensor(cu, dtype=torch.int32, device=q.device)
        )
        longest = max(cu[j + 1] - cu[j] for j in range(len(cu) - 1))
        out = _flash_varlen(
            q[0].transpose(0, 1),
            k[0].transpose(0, 1),
            v[0].transpose(0, 1),
            cu_t,
            cu_t,
            longest,
            longest,
            softmax_scale=scale,
            causal=causal,
        )
        return out.transpose(0, 1)[None]
    gqa = q.shape[1] != k.shape[1]
    # torch.split, not slicing: its backward is one concatenation, where every
    # slice's backward would write a gradient the size of the whole batch.
    lengths = [cu[j + 1] - cu[j] for j in range(len(cu) - 1)]
    outs = [
        torch.nn.functional.scaled_dot_product_attention(
            qs, ks, vs, is_causal=causal, scale=scale, enable_gqa=gqa
        )
        if n
        else qs.new_zeros(*qs.shape[:-1], vs.shape[-1])
        for n, qs, ks, vs in zip(lengths, *(torch.split(t, lengths, dim=2) for t in (q, k, v)))
    ]
    return torch.cat(outs, dim=2)
