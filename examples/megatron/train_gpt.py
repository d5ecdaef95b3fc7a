"""A small GPT trained through Megatron-Core with fcp's per-micro-batch CP groups.

    # GPU (NCCL, TransformerEngine): 8 GPUs as TP=2 x (DP x CP = 4)
    torchrun --nproc-per-node 8 examples/megatron/train_gpt.py --tp 2 --steps 5
    # CPU (gloo): planning, groups and Megatron's micro-batches only, no model
    torchrun --nproc-per-node 4 examples/megatron/train_gpt.py --dry-run --steps 2

Needs PYTHONPATH=build/python (the fcp planner) and megatron-core 0.19.2 (the
project's .venv312, CPython 3.12: `.venv312/bin/torchrun ...`); the model run
also needs CUDA and transformer-engine[pytorch] >= 2.16. Per step every rank prints
nothing; rank 0 prints the step's loss (mean per token over the global batch),
the number of micro-batches, the CP degrees used and the planning time that
training waited for (ms). --dry-run prints, per rank, what Megatron receives
in each micro-batch. See docs/megatron.md.
"""

import argparse
import os
import sys
import time
from functools import partial

import numpy as np
import torch
import torch.distributed as dist


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    p.add_argument("--pp", type=int, default=1, help="pipeline-parallel size")
    p.add_argument("--steps", type=int, default=3, help="global batches to train")
    p.add_argument("--seqs", type=int, default=32, help="sequences per global batch")
    p.add_argument("--max-len", type=int, default=4096, help="longest sequence (tokens)")
    p.add_argument(
        "--tokens-per-rank",
        type=int,
        default=4096,
        help="activation budget of one DP x CP rank (tokens), sets the toy cost model",
    )
    p.add_argument(
        "--ranks-per-node",
        type=int,
        default=0,
        help="DP x CP ranks per node for fcp's topology (0: all on one node)",
    )
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument(
        "--strategy",
        default="fcp-ring",
        choices=["fcp-ring", "fcp"],
        help="fcp planner strategy: ring groups only (TE 'p2p'), or also "
        "all-to-all groups (TE 'a2a'; --heads must be divisible by their degree)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="no model: print the micro-batches Megatron would receive (runs on CPU)",
    )
    p.add_argument(
        "--check-thd",
        action="store_true",
        help="before training, compare THD-packed losses with one-sequence-at-a-time "
        "losses of the same model (GPU)",
    )
    a = p.parse_args(argv)
    for name in (
        "tp",
        "pp",
        "steps",
        "seqs",
        "max_len",
        "tokens_per_rank",
        "layers",
        "hidden",
        "heads",
        "vocab",
    ):
        if getattr(a, name) < 1:
            print(f"error: --{name.replace('_', '-')}: must be >= 1", file=sys.stderr)
            sys.exit(2)
    return a


def synthetic_batches(args, steps):
    """Long-tailed lengths (log-normal, capped) and random tokens; the same on
    every rank (same seed), as a global batch must be."""
    import fcp.megatron as fm

    rng = np.random.default_rng(args.seed)
    for _ in range(steps):
        lengths = np.clip(rng.lognormal(5.5, 1.2, args.seqs), 8, args.max_len).astype(int)
        tokens = [torch.from_numpy(rng.integers(0, args.vocab, int(n) + 1)) for n in lengths]
        samples = [
            {"tokens": t[:-1], "labels": t[1:], "loss_mask": torch.ones(len(t) - 1)} for t in tokens
        ]
        yield fm.GlobalBatch.from_samples(samples)


def build_model(args, config):
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec

    return GPTModel(
        config,
        get_gpt_layer_with_transformer_engine_spec(),
        vocab_size=args.vocab,
        max_sequence_length=args.max_len + 64,
        position_embedding_type="rope",
        pre_process=ps.is_pipeline_first_stage(),
        post_process=ps.is_pipeline_last_stage(),
    )


def forward_step(data_iterator, model):
    import fcp.megatron as fm

    batch = next(data_iterator)
    out = model(
        batch["tokens"],
        batch["position_ids"],
        None,
        labels=batch["labels"],
        packed_seq_params=batch["packed_seq_params"],
    )
    return out, partial(fm.loss_func, batch["loss_mask"])


def check_thd(model, packer, batch, one_rank_group):
    """THD packing contract on one GPU, degree 1: the per-token losses of
    fcp's micro-batch (one-rank cp_group, local_cp_size 1) equal those of
    Megatron's own packed run of the same tokens (PackedSeqParams as
    pretrain_gpt.py's forward_step builds it, static CP 1: no cp_group), and
    those of each sequence run alone (bf16 tolerance)."""
    from megatron.core.packed_seq_params import PackedSeqParams

    samples = [batch.get_sample(i) for i in range(min(4, len(batch.lengths)))]
    with torch.no_grad():
        data, params = packer.pack(samples, 1, 0, one_rank_group)
        cu = params.cu_seqlens_q_padded
        megatron_params = PackedSeqParams(
            qkv_format="thd",
            cu_seqlens_q=cu,
            cu_seqlens_kv=cu,
            cu_seqlens_q_padded=cu,
            cu_seqlens_kv_padded=cu,
            max_seqlen_q=params.max_seqlen_q,
            max_seqlen_kv=params.max_seqlen_kv,
        )

        def losses(p):
            return (
                model(
                    data["tokens"],
                    data["position_ids"],
                    None,
                    labels=data["labels"],
                    packed_seq_params=p,
                )
                .float()
                .view(-1)
            )

        packed, megatron = losses(params), losses(megatron_params)
        real = data["loss_mask"].view(-1) > 0
        alone = []
        for s in samples:
            n = s["tokens"].numel()
            pos = torch.arange(n, device="cuda").unsqueeze(0)
            alone.append(
                model(
                    s["tokens"].cuda().unsqueeze(0),
                    pos,
                    None,
                    labels=s["labels"].cuda().unsqueeze(0),
                )
                .float()
                .view(-1)
            )
    same = (packed[real] - megatron[real]).abs().max().item()
    diff = (packed[real] - torch.cat(alone)).abs().max().item()
    ok = same < 1e-6 and diff < 5e-2
    print(
        f"check-thd: {len(samples)} sequences, max |loss_fcp - loss_megatron_packed| = "
        f"{same:.3e} (pass < 1e-6), max |loss_fcp - loss_alone| = {diff:.3e} "
        f"(bf16; pass < 5e-2): {'PASS' if ok else 'FAIL'}",
        flush=True,
    )
    return ok


def main(argv=None):
    args = parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print(
            "error: training needs CUDA GPUs (Megatron-Core's layers); on this CPU-only "
            "machine add --dry-run to print the plans Megatron would receive",
            file=sys.stderr,
        )
        sys.exit(2)
    use_cuda = torch.cuda.is_available() and not args.dry_run
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if use_cuda else "gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    if world % (args.tp * args.pp):
        print(f"error: --tp/--pp: world size {world} is not divisible by tp*pp", file=sys.stderr)
        sys.exit(2)

    import fcp
    import fcp.megatron as fm
    from megatron.core import parallel_state as ps

    fm.check_megatron_version()
    ps.initialize_model_parallel(
        tensor_model_parallel_size=args.tp,
        pipeline_model_parallel_size=args.pp,
        create_gloo_process_groups=True,
    )
    dp_cp = world // (args.tp * args.pp)
    # fcp plans the DP x CP ranks; a toy cost model with the given token budget.
    scheduler = fcp.Scheduler(
        cluster={"ranks": dp_cp, "ranks_per_node": args.ranks_per_node or dp_cp},
        model="qwen3-1.7b",
        strategy=args.strategy,
        cost_model={
            "mem_per_token": 1.0,
            "mem_static": 1.0,
            "mem_capacity": 1.0 + args.tokens_per_rank,
        },
    )
    # Verification all-reduces a plan digest on a CPU-capable group.
    sched = fm.FcpCPScheduler(
        scheduler, verify_group=ps.get_data_parallel_group_gloo(with_context_parallel=True)
    )
    packer = fm.MicroBatchPacker(device="cuda" if use_cuda else None)
    loader = fm.FcpMegatronLoader(sched, synthetic_batches(args, args.steps), packer)

    if args.dry_run:
        for step in range(args.steps):
            it, n = loader.next_global_batch()
            lines = []
            for j, mb in enumerate(it):
                p = mb["packed_seq_params"]
                members = dist.get_process_group_ranks(p.cp_group)  # one-rank group at degree 1
                lines.append(
                    f"  mb {j}: degree {p.local_cp_size} cp_group {members} "
                    f"sequences {len(p.cu_seqlens_q) - 1} local tokens "
                    f"{mb['tokens'].shape[1]} (real {int(mb['loss_mask'].sum())})"
                )
            text = (
                f"rank {rank} step {step}: {n} micro-batches, planning "
                f"{sched.planning_s[-1] * 1e3:.3f} ms, exposed "
                f"{sched.exposed_planning_s[-1] * 1e3:.3f} ms\n" + "\n".join(lines)
            )
            for r in range(world):  # print in rank order
                if r == rank:
                    print(text, flush=True)
                dist.barrier()
        sched.close()
        ps.destroy_model_parallel()
        dist.destroy_process_group()
        return 0

    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    model_parallel_cuda_manual_seed(args.seed)
    config = TransformerConfig(
        num_layers=args.layers,
        hidden_size=args.hidden,
        num_attention_heads=args.heads,
        ffn_hidden_size=4 * args.hidden,
        tensor_model_parallel_size=args.tp,
        hidden_dropout=0.0,
        attention_dropout=0.0,  # deterministic, so --check-thd can compare
        pipeline_model_parallel_size=args.pp,
        context_parallel_size=1,
        bf16=True,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
        calculate_per_token_loss=True,  # one normalisation over the global batch
        variable_seq_lengths=True,  # micro-batch shapes change with the plan
        moe_token_dispatcher_type="alltoall",
    )
    model = build_model(args, config).cuda()
    hooked = fm.prepare_model(model)
    one_rank_groups = [dist.new_group([r]) for r in range(world)]  # collective: every rank
    if args.check_thd and not check_thd(
        model,
        fm.MicroBatchPacker(device="cuda"),
        next(synthetic_batches(args, 1)),
        one_rank_groups[rank],
    ):
        return 1
    ddp = DistributedDataParallel(
        config, DistributedDataParallelConfig(grad_reduce_in_fp32=True), model
    )
    config.no_sync_func = ddp.no_sync
    config.finalize_model_grads_func = finalize_model_grads
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=args.lr, bf16=True), [ddp]
    )
    forward_backward = get_forward_backward_func()
    if rank == 0:
        print(
            f"fcp on Megatron-Core: world {world} = TP {args.tp} x PP {args.pp} x "
            f"DP*CP {dp_cp}; {hooked} attention layers follow PackedSeqParams.cp_group "
            f"(strategy {args.strategy})",
            flush=True,
        )
    for step in range(args.steps):
        t0 = time.perf_counter()
        it, n = loader.next_global_batch()
        ddp.zero_grad_buffer()
        optimizer.zero_grad()
        losses = forward_backward(
            forward_step_func=forward_step,
            data_iterator=it,
            model=[ddp],
            num_microbatches=n,
            seq_length=args.max_len,
            micro_batch_size=1,
            forward_only=False,
        )
        ok, grad_norm, _ = optimizer.step()
        totals = torch.zeros(2, device="cuda", dtype=torch.float64)
        if ps.get_tensor_model_parallel_rank() == 0:  # TP ranks hold the same loss
            for rep in losses:  # (only on the last PP stage)
                totals += rep["lm loss"].double()
        dist.all_reduce(totals)
        if rank == 0:
            print(
                f"step {step}: loss {float(totals[0] / totals[1]):.4f} (per token, "
                f"{int(totals[1])} tokens), {n} micro-batches, grad norm {float(grad_norm or 0):.3f}, "
                f"planning {sched.planning_s[-1] * 1e3:.2f} ms, exposed "
                f"{sched.exposed_planning_s[-1] * 1e3:.3f} ms, step "
                f"{(time.perf_counter() - t0) * 1e3:.0f} ms",
                flush=True,
            )
    sched.close()
    ps.destroy_model_parallel()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
