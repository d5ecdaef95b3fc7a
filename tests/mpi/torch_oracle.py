"""Float64 oracle for the executor's gradients, independent of its code.

Reads DIR/{config.txt, params.bin, batch.txt, tokens.bin} written by
`exec_mpitest dump`, rebuilds the byte-level transformer from its written
definition (docs/executor.md: pre-norm RMSNorm, RoPE on pairs (2i, 2i+1) at
global positions, softmax attention per sequence, SiLU MLP, untied
unembedding) in PyTorch float64, and lets autograd differentiate
(Σ cross-entropy of next-byte targets) / (number of targets). The mask of
a sequence with factor eta is a bidirectional prefix of p = round(sqrt(eta)·s)
tokens over a causal rest: key j visible to query i iff j <= i or j < p.
Writes DIR/grads_ref.bin (float32, the executor's flat layout) and
DIR/loss_ref.txt. Usage: torch_oracle.py DIR
"""

import math
import sys

import numpy as np
import torch


def main(d: str) -> None:
    dim, heads, layers, ffn, rope_base, eps = open(f"{d}/config.txt").read().split()
    D, H, L, F = int(dim), int(heads), int(layers), int(ffn)
    rope_base, eps = float(rope_base), float(eps)
    V, dh = 256, D // H
    flat = torch.tensor(
        np.fromfile(f"{d}/params.bin", dtype=np.float32), dtype=torch.float64, requires_grad=True
    )
    # The flat layout: embed [V,D]; per layer g1 [D], wq, wk, wv, wo [D,D],
    # g2 [D], w1 [D,F], w2 [F,D]; gf [D]; wout [D,V]; matrices [in, out].
    at = 0

    def take(*shape):
        nonlocal at
        n = math.prod(shape)
        t = flat[at : at + n].view(*shape)
        at += n
        return t

    embed = take(V, D)
    lay = []
    for _ in range(L):
        lay.append(
            dict(
                g1=take(D),
                wq=take(D, D),
                wk=take(D, D),
                wv=take(D, D),
                wo=take(D, D),
                g2=take(D),
                w1=take(D, F),
                w2=take(F, D),
            )
        )
    gf, wout = take(D), take(D, V)
    assert at == flat.numel(), (at, flat.numel())

    meta = [line.split() for line in open(f"{d}/batch.txt")]
    raw = np.fromfile(f"{d}/tokens.bin", dtype=np.uint8)

    def rms(x, g):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * g

    def rope(x, pos):  # x [s, H, dh]
        i = torch.arange(dh // 2, dtype=torch.float64)
        ang = pos[:, None].double() * rope_base ** (-2.0 * i / dh)  # [s, dh/2]
        c, s = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = a * s + b * c
        return out

    loss_sum = torch.zeros((), dtype=torch.float64)
    num_targets = 0
    off = 0
    for n_str, eta_str in meta:
        n, eta = int(n_str), float(eta_str)
        tok = torch.tensor(raw[off : off + n].astype(np.int64))
        off += n
        prefix = math.floor(math.sqrt(eta) * n + 0.5)
        i = torch.arange(n)
        visible = (i[None, :] <= i[:, None]) | (i[None, :] < prefix)
        pos = torch.arange(n)
        x = embed[tok]
        for p in lay:
            h = rms(x, p["g1"])
            q = rope((h @ p["wq"]).view(n, H, dh), pos).transpose(0, 1)
            k = rope((h @ p["wk"]).view(n, H, dh), pos).transpose(0, 1)
            v = (h @ p["wv"]).view(n, H, dh).transpose(0, 1)
            sc = (q @ k.transpose(1, 2)) / math.sqrt(dh)
            sc = sc.masked_fill(~visible, float("-inf"))
            o = (torch.softmax(sc, -1) @ v).transpose(0, 1).reshape(n, D)
            x = x + o @ p["wo"]
            u = rms(x, p["g2"]) @ p["w1"]
            x = x + (u * torch.sigmoid(u)) @ p["w2"]
        logits = rms(x, gf) @ wout
        loss_sum = loss_sum + torch.nn.functional.cross_entropy(
            logits[:-1], tok[1:], reduction="sum"
        )
        num_targets += n - 1
    loss = loss_sum / num_targets
    loss.backward()
    flat.grad.to(torch.float32).numpy().tofile(f"{d}/grads_ref.bin")
    with open(f"{d}/loss_ref.txt", "w") as f:
        f.write(f"{loss.item():.17g}\n")
    print(
        f"torch float64 oracle: {len(meta)} sequences, {num_targets} targets, "
        f"loss {loss.item():.9f}"
    )


if __name__ == "__main__":
    torch.set_num_threads(2)
    main(sys.argv[1])
