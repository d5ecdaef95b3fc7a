"""One CP rank's work of a transformer layer on PyTorch kernels, timed.

Shared by ``python -m fcp profile --target torch`` (fcp.profile_torch) and
``python -m fcp replay`` (fcp.replay). A group of packed sequences on ``d``
ranks gives every rank:

* the layer's GEMMs (QKV and output projections, SwiGLU FFN) on its
  ``sum(s) / d`` tokens, forward and backward (recompute ``full``: the
  forward runs twice, as activation checkpointing does);
* ring groups: its share of the zigzag-sharded attention. All ``d`` ranks'
  blocks of the packed sequences (one ``cu_seqlens`` call per mask, as
  ``fcp.torch.ring_attention`` takes them) run in this process through
  ``fcp.torch.blockwise_attention`` (the ring's pieces, kernels and fp32
  merge, without communication) and the time is divided by ``d``: the zigzag
  layout gives every rank the same causal work (chunks ``i`` and
  ``2d-1-i``), so this is each rank's time. At ``d = 1`` it is
  ``fcp.torch.ring_attention`` itself on a one-rank group (no ring: PyTorch's
  exact attention, the path a real one-rank group runs);
* all-to-all (Ulysses) groups: its attention after the all-to-all, through
  ``fcp.torch.ulysses_attention`` on a one-rank group (packed ``cu_seqlens``,
  one call per mask): whole sequences with ``q_heads / d`` query heads (and
  ``max(1, kv_heads / d)`` key/value heads);
* the ring's messages (K, V forward; K, V and fp32 dK, dV backward) and the
  all-to-all's (Q, K, V out and the output back, per pass; the gradients
  backward) as device copies or, on a real process group, the transfers.

Times are measured with a :class:`Clock`; CPU runs use one intra-op thread
and thread CPU time (other jobs on a shared machine stay out), CUDA runs wall
time between device synchronisations. Thread-safety: none.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Callable, List, Optional, Sequence, Tuple

import torch

#: Shapes that are not presets: cpu-tiny is the C++ cpu target's layer.
BUILTIN_SHAPES = {
    "cpu-tiny": dict(layers=1, hidden=256, q_heads=4, kv_heads=2, head_dim=64, ffn=768),
}

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclasses.dataclass
class LayerShape:
    """The timed layer: ``layers`` scales one layer's time."""

    name: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def model_shape(self):
        """The planner's ModelShape (head counts for all-to-all estimates)."""
        from fcp import _core

        s = _core().ModelShape()
        s.name, s.layers, s.hidden = self.name, self.layers, self.hidden
        s.q_heads, s.kv_heads, s.head_dim, s.ffn = (
            self.q_heads,
            self.kv_heads,
            self.head_dim,
            self.ffn,
        )
        return s


def shape_from_preset(name: str) -> LayerShape:
    """A model preset's (or cpu-tiny's) shape; ValueError naming --model."""
    if name in BUILTIN_SHAPES:
        return LayerShape(name=name, **BUILTIN_SHAPES[name])
    from fcp import _core

    for p in _core().model_presets():
        if p.shape.name == name:
            s = p.shape
            return LayerShape(name, s.layers, s.hidden, s.q_heads, s.kv_heads, s.head_dim, s.ffn)
    names = sorted(list(BUILTIN_SHAPES) + [p.shape.name for p in _core().model_presets()])
    raise ValueError(f"--model: unknown model '{name}' (one of {', '.join(names)})")


def shape_from_hf_config(path: str) -> LayerShape:
    """The shape of a Hugging Face ``config.json``; ValueError naming --hf-config."""
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"--hf-config: cannot read '{path}': {e}") from None
    cfg = cfg.get("text_config", cfg) if isinstance(cfg, dict) else cfg
    if not isinstance(cfg, dict):
        raise ValueError("--hf-config: must be a JSON object")

    def need(key, default=None):
        v = cfg.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"--hf-config: {key} must be a positive integer, got {v!r}")
        return v

    hidden, heads = need("hidden_size"), need("num_attention_heads")
    head_dim = need("head_dim", hidden // heads if hidden % heads == 0 else None)
    kv = need("num_key_value_heads", heads)
    if heads % kv:
        raise ValueError(
            f"--hf-config: num_key_value_heads ({kv}) must divide num_attention_heads ({heads})"
        )
    name = (
        cfg.get("_name_or_path")
        or cfg.get("model_type")
        or os.path.basename(os.path.dirname(os.path.abspath(path)))
    )
    return LayerShape(
        str(name), need("num_hidden_layers"), hidden, heads, kv, head_dim, need("intermediate_size")
    )


class Clock:
    """Seconds of the work between :meth:`start` and :meth:`stop`."""

    def __init__(self, device: torch.device):
        self.device = device
        cuda = device.type == "cuda"
        # One intra-op thread runs every CPU op on the calling thread, so its
        # CPU time is the work's, whatever else the machine runs.
        self._now = time.perf_counter if cuda or torch.get_num_threads() > 1 else time.thread_time
        self._sync = torch.cuda.synchronize if cuda else (lambda: None)

    def describe(self) -> str:
        if self.device.type == "cuda":
            return "wall time between CUDA synchronisations"
        return (
            "thread CPU time (1 intra-op thread)" if self._now is time.thread_time else "wall time"
        )

    def measure(self, fn: Callable[[], None], repeats: int) -> float:
        """The minimum over ``repeats`` runs of ``fn`` after one warm-up run."""
        fn()
        best = math.inf
        for _ in range(max(1, repeats)):
            self._sync()
            t0 = self._now()
            fn()
            self._sync()
            best = min(best, self._now() - t0)
        return best


@dataclasses.dataclass
class RankTime:
    """One rank's measured work of a group (s, all layers)."""

    linear_s: float  # GEMMs (and their recompute)
    attn_s: float  # this rank's attention (forward, recompute, backward)
    comm_s: float = 0.0  # ring messages, when measured

    @property
    def compute_s(self) -> float:
        return self.linear_s + self.attn_s


class LayerWork:
    """Builds and times one rank's share of a group on ``device``."""

    def __init__(
        self,
        shape: LayerShape,
        device: torch.device,
        dtype: torch.dtype,
        recompute: str = "full",
        repeats: int = 3,
        clock: Optional[Clock] = None,
    ):
        if recompute not in ("full", "selective", "none"):
            raise ValueError(f"--recompute: must be full, selective or none, got {recompute!r}")
        self.shape, self.device, self.dtype = shape, device, dtype
        self.recompute, self.repeats = recompute, repeats
        self.clock = clock or Clock(device)
        h, dh = shape.hidden, shape.head_dim
        q_out, kv_out = shape.q_heads * dh, shape.kv_heads * dh
        g = torch.Generator(device="cpu").manual_seed(0)

        def weight(rows, cols):
            w = torch.randn(rows, cols, generator=g) / math.sqrt(cols)
            return w.to(device=device, dtype=dtype).requires_grad_(True)

        self.w_qkv = weight(q_out + 2 * kv_out, h)
        self.w_o = weight(h, q_out)
        self.w_gate_up = weight(2 * shape.ffn, h)
        self.w_down = weight(h, shape.ffn)
        self.params = [self.w_qkv, self.w_o, self.w_gate_up, self.w_down]

    # -- the layer's GEMMs on n tokens --------------------------------------
    def _linear_forward(self, x):
        s = self.shape
        qkv = torch.nn.functional.linear(x, self.w_qkv)
        q = qkv[:, : s.q_heads * s.head_dim]  # stands in for the attention output
        x = x + torch.nn.functional.linear(q.contiguous(), self.w_o)
        gate, up = torch.nn.functional.linear(x, self.w_gate_up).chunk(2, dim=-1)
        return x + torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, self.w_down)

    def _linear_step(self, tokens: int):
        x = torch.randn(
            tokens, self.shape.hidden, device=self.device, dtype=self.dtype, requires_grad=True
        )

        def run():
            for p in self.params:
                p.grad = None
            if self.recompute == "full":
                with torch.no_grad():
                    self._linear_forward(x)
            y = self._linear_forward(x)
            y.backward(torch.ones_like(y))

        return run

    def linear_s(self, tokens: int) -> float:
        """One layer's GEMMs on ``tokens`` tokens, times layers."""
        if tokens < 1:
            return 0.0
        return self.clock.measure(self._linear_step(tokens), self.repeats) * self.shape.layers

    # -- attention -----------------------------------------------------------
    def _packs(
        self,
        seqs: Sequence[Tuple[int, float]],
        heads: int,
        kv_heads: int,
        shard: Optional[Tuple[int, int]] = None,
    ):
        """The group's sequences as one packed (cu_seqlens) q, k, v per mask,
        causal sequences then full ones, as fcp.torch's calls take them: whole,
        or with ``shard=(degree, rank)`` that rank's zigzag shard of each."""
        dh, packs = self.shape.head_dim, []
        for causal in (True, False):
            lengths = [n for n, eta in seqs if (eta < 0.5) == causal]
            if not lengths:
                continue
            cu = [0]
            for n in lengths:
                cu.append(cu[-1] + n)
            tokens = cu[-1]
            if shard is not None:
                from fcp.torch import local_cu_seqlens

                tokens = local_cu_seqlens(cu, *shard)[-1]

            def mk(h, n=tokens):
                return torch.randn(
                    h, n, dh, device=self.device, dtype=self.dtype, requires_grad=True
                )

            packs.append((mk(heads), mk(kv_heads), mk(kv_heads), cu, causal))
        return packs

    def _attention_run(self, packs, attend) -> Callable[[], None]:
        """Forward (and its recompute), backward of ``attend`` on every pack."""
        recompute = self.recompute in ("full", "selective")

        def run():
            for q, k, v, cu, causal in packs:
                if recompute:
                    with torch.no_grad():
                        attend(q, k, v, cu, causal)
                out = attend(q, k, v, cu, causal)
                out.backward(torch.ones_like(out))

        return run

    def ring_attn_s(self, seqs: Sequence[Tuple[int, float]], degree: int) -> float:
        """One rank's share of a ring group's attention: all d ranks' blocks
        of the packed sequences through fcp.torch.blockwise_attention (the
        ring's pieces and merge), over d; at d = 1 fcp.torch.ring_attention on
        a one-rank group, which runs no ring (PyTorch's exact attention)."""
        from fcp.torch import CPGroup, blockwise_attention, ring_attention

        s, one = self.shape, CPGroup([0])

        def attend(q, k, v, cu, causal):
            if degree == 1:
                return ring_attention(q, k, v, one, causal, cu_seqlens=cu)
            return blockwise_attention(q, k, v, degree, causal, cu_seqlens=cu)

        run = self._attention_run(self._packs(seqs, s.q_heads, s.kv_heads), attend)
        return self.clock.measure(run, self.repeats) * s.layers / degree

    def all_to_all_heads(self, degree: int) -> Tuple[int, int]:
        """(query, key/value) heads one rank of a Ulysses group attends with."""
        s = self.shape
        if s.q_heads % degree:
            raise ValueError(
                f"degree: an all-to-all group of degree {degree} needs it to divide "
                f"the {s.q_heads} query heads"
            )
        heads = s.q_heads // degree
        kv = max(1, s.kv_heads // degree)
        return heads, kv if heads % kv == 0 else 1

    def all_to_all_attn_s(self, seqs: Sequence[Tuple[int, float]], degree: int) -> float:
        """One rank's attention in a Ulysses group after its all-to-all:
        fcp.torch.ulysses_attention on a one-rank group (whole packed
        sequences, q_heads / d heads), as a real group calls it."""
        from fcp.torch import CPGroup, ulysses_attention

        one = CPGroup([0])

        def attend(q, k, v, cu, causal):
            return ulysses_attention(q, k, v, one, causal, cu_seqlens=cu)

        run = self._attention_run(self._packs(seqs, *self.all_to_all_heads(degree)), attend)
        return self.clock.measure(run, self.repeats) * self.shape.layers

    def rank_time(
        self, seqs: Sequence[Tuple[int, float]], degree: int, all_to_all: bool = False
    ) -> RankTime:
        tokens = sum(length for length, _ in seqs)
        local = -(-tokens // degree)
        attn = (
            self.all_to_all_attn_s(seqs, degree) if all_to_all else self.ring_attn_s(seqs, degree)
        )
        return RankTime(linear_s=self.linear_s(local), attn_s=attn)

    # -- the ring's messages -------------------------------------------------
    def ring_message_bytes(self, local_tokens: int) -> Tuple[int, int]:
        """(forward, backward) bytes of one ring step of one layer: K, V of the
        rank's chunk; backward K, V and their fp32 gradients."""
        kv = 2 * self.shape.kv_heads * self.shape.head_dim * local_tokens
        elem = torch.finfo(self.dtype).bits // 8
        return kv * elem, kv * (elem + 4)

    def ring_steps(self, degree: int) -> Tuple[int, int]:
        """(forward, backward) ring transfers per layer: d - 1 each; the
        forward twice with recompute."""
        fwd = (degree - 1) * (2 if self.recompute in ("full", "selective") else 1)
        return fwd, degree - 1

    def copy_comm_s(self, local_tokens: int, degree: int) -> float:
        """The ring's messages as device copies (one process), all layers."""
        if degree < 2:
            return 0.0
        fwd_b, bwd_b = self.ring_message_bytes(local_tokens)
        fwd_n, bwd_n = self.ring_steps(degree)
        bufs = [
            (
                torch.empty(b, dtype=torch.uint8, device=self.device),
                torch.empty(b, dtype=torch.uint8, device=self.device),
                n,
            )
            for b, n in ((fwd_b, fwd_n), (bwd_b, bwd_n))
        ]

        def run():
            for src, dst, n in bufs:
                for _ in range(n):
                    dst.copy_(src)

        return self.clock.measure(run, self.repeats) * self.shape.layers

    def all_to_all_call_bytes(self, local_tokens: int, degree: int) -> List[int]:
        """Bytes one rank sends in each all-to-all of one pass of one layer
        (fcp.torch.ulysses_attention: Q, K, V scattered by heads, the output
        gathered back; backward the same four with the gradients): of each
        tensor it keeps 1/d and sends the rest. K and V count the heads every
        slot receives (replicated when the group exceeds the kv heads)."""
        heads, kv = self.all_to_all_heads(degree)
        elem = torch.finfo(self.dtype).bits // 8
        per_head = self.shape.head_dim * local_tokens * elem * (degree - 1) // degree
        q, kv_all = heads * degree * per_head, kv * degree * per_head
        return [q, kv_all, kv_all, q]

    def all_to_all_passes(self) -> int:
        """Passes of all-to-alls per layer: forward, its recompute, backward."""
        return 3 if self.recompute in ("full", "selective") else 2

    def copy_all_to_all_s(self, local_tokens: int, degree: int) -> float:
        """The all-to-alls' bytes as device copies (one process), all layers."""
        if degree < 2:
            return 0.0
        bufs = [
            (
                torch.empty(b, dtype=torch.uint8, device=self.device),
                torch.empty(b, dtype=torch.uint8, device=self.device),
            )
            for b in self.all_to_all_call_bytes(local_tokens, degree)
        ]
        passes = self.all_to_all_passes()

        def run():
            for _ in range(passes):
                for src, dst in bufs:
                    dst.copy_(src)

        return self.clock.measure(run, self.repeats) * self.shape.layers

    def copy_bandwidth(self, nbytes: int = 16 << 20) -> float:
        """Bytes/s of one device copy of ``nbytes``."""
        src = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        dst = torch.empty_like(src)
        t = self.clock.measure(lambda: dst.copy_(src), 5)
        return nbytes / max(t, 1e-9)


def mem_estimates(shape: LayerShape, dtype: torch.dtype) -> Tuple[float, float]:
    """(mem_per_token, mem_static) bytes, ESTIMATED for the cost model's memory
    fields: per token the layers' checkpointed inputs plus one layer's working
    set; static: weights, gradients and Adam states (16 bytes per parameter)."""
    elem = torch.finfo(dtype).bits // 8
    s = shape
    dq, dkv = s.q_heads * s.head_dim, s.kv_heads * s.head_dim
    per_token = elem * (s.layers * s.hidden + 2 * (dq + 2 * dkv) + 3 * s.ffn + 4 * s.hidden)
    params = s.layers * (s.hidden * (dq + 2 * dkv) + dq * s.hidden + 3 * s.hidden * s.ffn)
    return float(per_token), float(16 * params)


def device_memory_bytes(device: torch.device) -> float:
    """Memory one rank may use: the GPU's, or this machine's RAM over its CPUs."""
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    total = 8e9
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    total = float(line.split()[1]) * 1024
    except OSError:
        pass
    return total / max(1, os.cpu_count() or 1)


def resolve_device(name: Optional[str]) -> torch.device:
    """--device: cuda when available unless cpu is asked; ValueError otherwise."""
    if name not in (None, "cpu", "cuda"):
        raise ValueError(f"--device: must be cpu or cuda, got {name!r}")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device: cuda asked but torch.cuda.is_available() is False")
    if name is None:
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")
