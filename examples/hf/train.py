"""Train a Hugging Face transformers causal LM on fcp plans (fcp.hf).

Run one process per rank:

    torchrun --nproc-per-node 4 examples/hf/train.py --model qwen3 --steps 3 --check

Builds a real transformers model class (Qwen3ForCausalLM or LlamaForCausalLM)
from a small config with the head counts of the planner's model preset
(random init, nothing downloaded), draws global batches of real sequence
lengths, plans each with fcp.Scheduler (the next one on a worker thread),
trains with fcp's "fcp" attention and prints per step the plan's layout
(`[2,1,1] [4u]`: group degrees per micro-batch, u = all-to-all), the loss and
tokens/s. The planner sees the real lengths; the tokens that run are scaled
down per batch so that its longest sequence has at most --max-tokens tokens
(a CPU cannot train 100k-token sequences; the layouts are the ones the
cluster would run). --check also runs each global batch in one process on the
plain model with SDPA attention (same weights, same tokens) and prints
`check: loss rel diff X, max grad rel diff Y` (exit 1 when either > 1e-5).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_LENGTHS = REPO / "data" / "go-src-qwen3-lengths.csv"
# Tiny configs with the attention heads of the preset the planner costs, so
# that every all-to-all degree it picks divides the heads here too.
MODELS = {
    "qwen3": {"preset": "qwen3-1.7b", "heads": 16, "kv_heads": 8},
    "llama": {"preset": "llama3.2-1b", "heads": 32, "kv_heads": 8},
}
VOCAB = 512
TOLERANCE = 1e-5


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, as every fcp command
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def parse_args(argv=None):
    p = _Parser(
        description="Train a transformers causal LM on fcp plans (run under torchrun).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--model",
        choices=sorted(MODELS),
        default="qwen3",
        help="model class (Qwen3ForCausalLM / LlamaForCausalLM), tiny random config",
    )
    p.add_argument("--steps", type=int, default=3, help="global batches to train")
    p.add_argument(
        "--lengths",
        default=str(DEFAULT_LENGTHS),
        help="sequence lengths file (any format `fcp lengths` reads)",
    )
    p.add_argument("--global-batch", type=int, default=16, help="sequences per global batch")
    p.add_argument(
        "--max-tokens",
        type=int,
        default=1024,
        help="longest sequence that runs; longer batches are scaled down",
    )
    p.add_argument(
        "--in-order",
        action="store_true",
        help="take the lengths in file order instead of a seeded shuffle",
    )
    p.add_argument("--hardware", default="h100-8x8", help="hardware preset the planner costs")
    p.add_argument(
        "--ranks-per-node",
        type=int,
        default=0,
        help="ranks per node of the planned cluster (0: all ranks on one node)",
    )
    p.add_argument(
        "--strategy", default="fcp", help="planner strategy (fcp mixes ring and all-to-all groups)"
    )
    p.add_argument(
        "--wrap",
        choices=["plain", "ddp", "fsdp2"],
        default="ddp",
        help="gradient reduction: fcp.torch.reduce_gradients, DDP or FSDP2",
    )
    p.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="recompute each decoder layer in the backward (transformers' own)",
    )
    p.add_argument("--layers", type=int, default=2, help="decoder layers")
    p.add_argument("--head-dim", type=int, default=8, help="attention head dimension")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate")
    p.add_argument("--seed", type=int, default=0, help="seed of weights, lengths and tokens")
    p.add_argument(
        "--learn",
        action="store_true",
        help="the planner learns from each step's measured group times (fcp.Scheduler.observe)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="compare loss and gradients with one process running SDPA",
    )
    args = p.parse_args(argv)
    for name in ("steps", "global_batch", "max_tokens", "layers"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    if args.ranks_per_node < 0:
        p.error(f"--ranks-per-node: must be >= 0, got {args.ranks_per_node}")
    if args.head_dim < 2 or args.head_dim % 2:
        p.error(f"--head-dim: must be even and >= 2 (RoPE), got {args.head_dim}")
    if not args.lr > 0:
        p.error(f"--lr: must be > 0, got {args.lr}")
    return args


def read_lengths(path):
    from fcp.lengths import read_lengths as read

    try:
        lengths, _ = read([path])
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: --lengths: {e}") from None
    if not lengths:
        raise SystemExit(f"error: --lengths: {path} holds no sequence")
    return lengths


def length_batches(lengths, args):
    """(plan length, run length) per sequence, one list per global batch."""
    order = list(lengths)
    if not args.in_order:
        random.Random(args.seed).shuffle(order)
    for step in range(args.steps):
        start = step * args.global_batch
        real = [order[(start + j) % len(order)] for j in range(args.global_batch)]
        scale = min(1.0, args.max_tokens / max(real))
        yield [(s, max(2, round(s * scale))) for s in real]


def token_batches(lengths, args):
    """Global batches of dicts (input_ids, plan_length), identical on every rank."""
    import torch

    for step, batch in enumerate(length_batches(lengths, args)):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        yield [
            {"input_ids": torch.randint(0, VOCAB, (n,), generator=g), "plan_length": s}
            for s, n in batch
        ]


def build_model(args, attn_implementation):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    spec = MODELS[args.model]
    common = dict(
        vocab_size=VOCAB,
        hidden_size=spec["heads"] * args.head_dim,
        intermediate_size=2 * spec["heads"] * args.head_dim,
        num_hidden_layers=args.layers,
        num_attention_heads=spec["heads"],
        num_key_value_heads=spec["kv_heads"],
        head_dim=args.head_dim,
        attention_dropout=0.0,
        tie_word_embeddings=False,
        max_position_embeddings=max(4096, args.max_tokens),
    )
    config = Qwen3Config(**common) if args.model == "qwen3" else LlamaConfig(**common)
    torch.manual_seed(args.seed)
    return AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)


def wrap(model, kind):
    import torch.distributed as dist

    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)
    if kind == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        mesh = init_device_mesh(device, (dist.get_world_size(),))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        return fully_shard(model, mesh=mesh)
    return model


def full_tensors(named, attr=None):
    """name -> full tensor of each parameter (or its .grad): a collective
    under FSDP2 (DTensor), so every rank calls it in the same order."""
    out = {}
    for name, p in named:
        t = p if attr is None else getattr(p, attr)
        if t is None:
            t = p.new_zeros(p.shape)
        if hasattr(t, "full_tensor"):
            t = t.full_tensor()
        out[name.removeprefix("module.")] = t.detach().float().cpu().clone()
    return out


def reference(args, weights, examples):
    """Loss and gradients of the global batch in this process: the plain
    model with SDPA, one sequence at a time, per-token mean over the batch."""
    import torch
    import torch.nn.functional as F
    from fcp.hf import IGNORE_INDEX, shifted_labels

    model = build_model(args, "sdpa")
    model.load_state_dict(weights)
    total = sum(len(e["input_ids"]) - 1 for e in examples)
    loss_sum = 0.0
    for e in examples:
        ids = e["input_ids"]
        labels = torch.tensor(shifted_labels(ids.tolist()))
        logits = model(input_ids=ids[None], use_cache=False).logits[0].float()
        loss = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum")
        (loss / total).backward()
        loss_sum += float(loss.detach())
    grads = {
        n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().float()
        for n, p in model.named_parameters()
    }
    return loss_sum / total, grads


def rel_diff(a, b):
    scale = float(b.norm())
    return float((a - b).norm()) / scale if scale > 0 else float((a - b).norm())


def setup_distributed():
    import torch
    import torch.distributed as dist

    if "RANK" not in os.environ:  # plain `python train.py`: a world of one
        os.environ.update(
            RANK="0",
            WORLD_SIZE="1",
            LOCAL_RANK="0",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=os.environ.get("MASTER_PORT", "29561"),
        )
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        dist.init_process_group("nccl")
    else:
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def make_scheduler(args, world):
    """The planner for this world; bad --hardware/--strategy/--ranks-per-node
    end here, before any process group exists."""
    import fcp

    try:
        return fcp.Scheduler(
            cluster=fcp.Cluster(world, args.ranks_per_node or world, args.hardware),
            model=MODELS[args.model]["preset"],
            strategy=args.strategy,
            seed=args.seed,
        )
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None


def main(argv=None) -> int:
    args = parse_args(argv)
    lengths = read_lengths(args.lengths)
    sched = make_scheduler(args, int(os.environ.get("WORLD_SIZE", "1")))
    import torch
    import torch.distributed as dist

    import fcp.hf

    rank, world = setup_distributed()
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if dist.get_backend() == "nccl"
        else torch.device("cpu")
    )
    spec = MODELS[args.model]
    model = build_model(args, fcp.hf.register()).to(device)
    model.train()
    if args.activation_checkpointing:
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
    model_class = type(model).__name__  # fully_shard renames the class
    trained = wrap(model, args.wrap)
    optimizer = torch.optim.AdamW(trained.parameters(), lr=args.lr)
    check_batches = list(token_batches(lengths, args)) if args.check else None
    loader = fcp.hf.PackedLoader(token_batches(lengths, args), sched, device=device)
    if rank == 0:
        print(
            f"fcp.hf: {model_class} ({args.layers} layers, {spec['heads']}/"
            f"{spec['kv_heads']} heads, head_dim {args.head_dim}, random init) on {world} "
            f"ranks ({dist.get_backend()}, {args.wrap}); planned as {spec['preset']} on "
            f"{args.hardware} with {args.ranks_per_node or world} ranks/node, strategy "
            f"{args.strategy}; batches of {args.global_batch} lengths from "
            f"{os.path.basename(args.lengths)}, scaled to <= {args.max_tokens} tokens",
            flush=True,
        )
    worst_loss, worst_grad = 0.0, 0.0
    for step, batch in enumerate(loader):
        weights = full_tensors(trained.named_parameters()) if args.check else None
        t0 = time.perf_counter()
        loss = fcp.hf.train_step(trained, batch)
        grads = full_tensors(trained.named_parameters(), "grad") if args.check else None
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - t0
        tokens = sum(batch.lengths)
        if rank == 0:
            print(
                f"step {step}: {batch.layout}  loss {loss:.6f}  {tokens} tokens  "
                f"{tokens / seconds:.0f} tokens/s  planning {batch.planning_s * 1e3:.1f} ms "
                f"(exposed {batch.exposed_planning_s * 1e3:.1f} ms)",
                flush=True,
            )
        if args.learn:
            learnt = loader.observe(batch)
            if rank == 0:
                print(
                    f"learn: {learnt['groups']} groups, RMS log error of their estimates "
                    f"{learnt['rms_rel_before']:.3f} -> {learnt['rms_rel_after']:.3f}",
                    flush=True,
                )
        if args.check and rank == 0:
            ref_loss, ref_grads = reference(args, weights, check_batches[step])
            worst_loss = max(worst_loss, abs(loss - ref_loss) / abs(ref_loss))
            worst_grad = max(worst_grad, max(rel_diff(grads[n], g) for n, g in ref_grads.items()))
    loader.close()
    ok = True
    if args.check and rank == 0:
        ok = worst_loss <= TOLERANCE and worst_grad <= TOLERANCE and math.isfinite(worst_grad)
        print(
            f"check: loss rel diff {worst_loss:.2e}, max grad rel diff {worst_grad:.2e}"
            f"{'' if ok else f' (above {TOLERANCE:g})'}",
            flush=True,
        )
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
