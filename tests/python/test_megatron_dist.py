"""fcp.megatron against the real megatron-core 0.19.2 on 4 gloo processes.

One spawn per module (importing Megatron is slow on small machines); the
worker records what Megatron would receive, the tests compare it with
independent oracles: the plan itself, single-process RoPE on whole sequences,
the single-process per-token mean loss, and TE's THD partition rule
re-derived by reshaping.
"""

import os

import pytest
import torch
import torch.multiprocessing as mp

import fcp
import megatron.core  # noqa: F401  (the Megatron venv has it; missing = failure)

assert fcp._fcp is not None, f"fcp._fcp is not built for this interpreter: {fcp._IMPORT_ERROR}"

WORLD = 4
# A toy cost model in which one rank holds 64 tokens, so 10..150-token
# sequences need degrees 1..3 and a batch needs several micro-batches.
TOY_COST = {"mem_per_token": 1.0, "mem_static": 1.0, "mem_capacity": 65.0}
BATCHES = [[150, 20, 33, 7, 90, 12, 40, 64, 5, 100], [120, 9, 70, 31, 18, 66, 3, 44]]
HEAD_DIM = 8


def toy_scheduler(ranks):
    return fcp.Scheduler(
        cluster={"ranks": ranks, "ranks_per_node": ranks},
        model="qwen3-1.7b",
        strategy="fcp-ring",
        cost_model=TOY_COST,
    )


def sample(batch, i, n):
    """Sequence i of global batch `batch`: token t = 1000*i + position (so
    every token says where it came from); per-token loss defined below."""
    pos = torch.arange(n)
    return {"tokens": 1000 * i + pos + 100000 * batch, "labels": pos, "loss_mask": torch.ones(n)}


def token_loss(tokens):
    """Depends on the sequence (id % 3) so that long and short sequences
    differ, plus a per-token part."""
    seq = (tokens % 100000) // 1000
    return (seq % 3).double() + ((tokens * 7919) % 101).double() / 101.0


def _rope_inputs(seq_id, padded_len, heads):
    g = torch.Generator().manual_seed(seq_id)
    return torch.randn(padded_len, heads, HEAD_DIM, generator=g, dtype=torch.float64)


def _worker(rank, out_dir):
    import warnings

    warnings.filterwarnings("ignore")
    import torch.distributed as dist

    # Rendezvous through a file in the test's own directory: no TCP port to pick
    # and release before the workers bind it (EADDRINUSE under load).
    dist.init_process_group(
        "gloo",
        init_method="file://" + os.path.join(out_dir, "rendezvous"),
        rank=rank,
        world_size=WORLD,
    )
    from megatron.core import parallel_state as ps
    from megatron.core.models.common.embeddings.rope_utils import apply_rotary_pos_emb
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.packed_seq_params import PackedSeqParams
    from megatron.core.pipeline_parallel.schedules import forward_step_calc_loss
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig
    import fcp.megatron as fm

    out = {"rank": rank}

    # --- A: TP = 2 -> plan ranks are DP x CP = 2; TP coordinates kept apart.
    ps.initialize_model_parallel(tensor_model_parallel_size=2, create_gloo_process_groups=False)
    grid = fm.RankGrid.from_parallel_state()
    cache = fm.grid_group_cache(grid)
    group = cache.get([0, 1]).process_group
    t = torch.tensor([rank])
    dist.all_reduce(t, group=group)
    out["tp2"] = {
        "coordinates": grid.coordinates,
        "plan_rank": grid.plan_rank,
        "tp_rank": ps.get_tensor_model_parallel_rank(),
        "members": dist.get_process_group_ranks(group),
        "sum": int(t),
    }
    ps.destroy_model_parallel()

    # --- B: TP = 1 -> 4 plan ranks; the loader over two global batches.
    ps.initialize_model_parallel(tensor_model_parallel_size=1, create_gloo_process_groups=False)
    sched = fm.FcpCPScheduler(toy_scheduler(WORLD), background=True, verify=True)
    batches = [
        fm.GlobalBatch(lens, (lambda b, L: lambda i: sample(b, i, L[i]))(b, lens))
        for b, lens in enumerate(BATCHES)
    ]
    loader = fm.FcpMegatronLoader(sched, batches)

    cfg = TransformerConfig(
        num_layers=1,
        hidden_size=4 * HEAD_DIM,
        num_attention_heads=4,
        use_cpu_initialization=True,
        calculate_per_token_loss=True,
        variable_seq_lengths=True,
        moe_token_dispatcher_type="alltoall",
        params_dtype=torch.float64,
    )
    # Megatron's own scheduler and fcp's on the same input, same interface.
    from megatron.core.pipeline_parallel.hybrid_cp_schedule import BalancedCPScheduler

    balanced = BalancedCPScheduler(
        max_seq_len_per_rank=64, dp_cp_group=ps.get_data_parallel_group(with_context_parallel=True)
    )
    out["interface"] = {
        "megatron": balanced.get_groups_and_subsamples(list(enumerate(BATCHES[0])), cfg)[1],
        "fcp": sched.get_groups_and_subsamples(list(enumerate(BATCHES[0])), cfg)[1],
    }
    rope = RotaryEmbedding(kv_channels=HEAD_DIM, rotary_percent=1.0, use_cpu_initialization=True)

    # A real SelfAttention from Megatron's local spec; its core attention (TE on
    # GPU) is replaced by a recorder of the query it receives after RoPE.
    torch.manual_seed(0)
    attn = build_module(
        get_gpt_layer_local_spec().submodules.self_attention, config=cfg, layer_number=1
    ).double()
    recorded = []

    class Recorder(torch.nn.Module):
        def forward(
            self,
            query,
            key,
            value,
            attention_mask,
            attn_mask_type=None,
            attention_bias=None,
            packed_seq_params=None,
        ):
            recorded.append(query.detach().clone())
            return torch.zeros(
                query.shape[0], 1, query.shape[1] * query.shape[2], dtype=query.dtype
            )

    attn.core_attention = Recorder()
    try:  # no TransformerEngine here: one clear error, then the RoPE hook alone
        fm.prepare_model(attn)
        out["prepare_error"] = None
    except RuntimeError as e:
        out["prepare_error"] = str(e)
    hooked = len(fm.hook_rope(attn))

    def emb(max_len):  # RotaryEmbedding.get_emb without its move to CUDA
        f = rope.get_freqs_non_repeated(max_len)
        return torch.cat((f, f), dim=-1)[:, None, None, :]

    steps = []
    loss_sum, token_sum = torch.zeros((), dtype=torch.float64), 0
    for b in range(len(BATCHES)):
        it, n = loader.next_global_batch()
        for j, mb in enumerate(it):
            p = mb["packed_seq_params"]
            rec = {
                "batch": b,
                "micro_batch": j,
                "n": n,
                "local_cp_size": p.local_cp_size,
                "is_psp": isinstance(p, PackedSeqParams),
                "qkv_format": p.qkv_format,
                "cu": p.cu_seqlens_q.tolist(),
                "cu_padded": p.cu_seqlens_q_padded.tolist(),
                "max_seqlen": p.max_seqlen_q,
                "has_group": p.cp_group is not None,
                "members": dist.get_process_group_ranks(p.cp_group),
                "cp_rank": p.cp_group.rank(),
                "tokens": mb["tokens"][0].tolist(),
                "loss_mask": mb["loss_mask"][0].tolist(),
                "position_ids": mb["position_ids"][0].tolist(),
            }
            d = p.local_cp_size
            padded = [
                p.cu_seqlens_q_padded[k + 1] - p.cu_seqlens_q_padded[k]
                for k in range(len(p.cu_seqlens_q_padded) - 1)
            ]
            # RoPE on the shard with Megatron's THD RoPE and the micro-batch's
            # group vs. RoPE on whole sequences, then cut by TE's rule.
            if d > 1:
                full = [_rope_inputs(k, int(L), 2) for k, L in enumerate(padded)]
                freqs = emb(p.max_seqlen_q).double()
                whole = torch.cat([_rope_whole(x, freqs) for x in full])
                idx = fm.thd_partition_indices([int(L) for L in padded], d, p.cp_group.rank())
                local = torch.cat(full).index_select(0, idx)
                got = apply_rotary_pos_emb(
                    local, freqs, cfg, cu_seqlens=p.cu_seqlens_q_padded, cp_group=p.cp_group
                )
                rec["rope_err"] = float((got - whole.index_select(0, idx)).abs().max())
                # The real attention layer, hooked: its RoPE must follow the group.
                hidden = torch.randn(
                    int(p.cu_seqlens_q_padded[-1]),
                    1,
                    cfg.hidden_size,
                    generator=torch.Generator().manual_seed(b * 100 + j),
                    dtype=torch.float64,
                )
                recorded.clear()
                attn(
                    hidden.index_select(0, idx),
                    None,
                    rotary_pos_emb=(freqs, freqs),
                    packed_seq_params=p,
                )
                ref_params = PackedSeqParams(
                    qkv_format="thd",
                    cu_seqlens_q=p.cu_seqlens_q,
                    cu_seqlens_kv=p.cu_seqlens_kv,
                    cu_seqlens_q_padded=p.cu_seqlens_q_padded,
                    cu_seqlens_kv_padded=p.cu_seqlens_kv_padded,
                    max_seqlen_q=p.max_seqlen_q,
                    max_seqlen_kv=p.max_seqlen_kv,
                    local_cp_size=1,
                    cp_group=None,
                )
                attn(hidden, None, rotary_pos_emb=(freqs, freqs), packed_seq_params=ref_params)
                rec["attn_rope_err"] = float(
                    (recorded[0] - recorded[1].index_select(0, idx)).abs().max()
                )
                rec["pg_restored"] = attn.pg_collection.cp is ps.get_context_parallel_group()
            # Loss through Megatron's own loss bookkeeping (per-token mode).
            out_tensor = token_loss(mb["tokens"][0]).requires_grad_()
            loss, num_tokens = forward_step_calc_loss(
                attn,
                out_tensor,
                lambda o: fm.loss_func(mb["loss_mask"], o),
                cfg,
                None,
                False,
                n,
                [],
                cp_group_size=1,
                is_last_stage=True,
            )
            rec["loss"], rec["num_tokens"] = float(loss), int(num_tokens)
            loss_sum = loss_sum + loss.detach().double()
            token_sum += int(num_tokens)
            steps.append(rec)
        # Learning from the batch (host-clock times here): one all-gather,
        # the same coefficients on every rank.
        loader.mark_end()
        out.setdefault("calibration", []).append(loader.observe())
    out["steps"] = steps
    out["hooked"] = hooked
    out["exposed_s"] = list(sched.exposed_planning_s)
    out["planning_s"] = list(sched.planning_s)
    totals = torch.tensor([float(loss_sum), float(token_sum)], dtype=torch.float64)
    dist.all_reduce(totals)
    out["global_loss"] = float(totals[0] / totals[1])
    out["global_tokens"] = int(totals[1])

    # Ranks that plan different batches are stopped, all of them.
    odd = fm.FcpCPScheduler(
        toy_scheduler(WORLD), grid=sched.grid, cache=sched.cache, background=False
    )
    try:
        odd.take(BATCHES[0] if rank else BATCHES[0][::-1])
        out["disagreement_raised"] = False
    except RuntimeError as e:
        out["disagreement_raised"] = "planned different" in str(e)

    # Without fcp's hook the layer applies RoPE with the group it was built
    # with (size 1): Megatron's THD RoPE cannot even split the shard.
    bare = build_module(
        get_gpt_layer_local_spec().submodules.self_attention, config=cfg, layer_number=1
    ).double()
    bare.core_attention = Recorder()
    multi = [s for s in steps if s["local_cp_size"] > 1]
    out["unhooked_fails"] = None
    if multi:
        loader2 = fm.FcpMegatronLoader(sched, batches[:1])
        it, _ = loader2.next_global_batch()
        for mb in it:
            p = mb["packed_seq_params"]
            if p.local_cp_size > 1:
                T = mb["tokens"].shape[1]
                try:
                    bare(
                        torch.randn(T, 1, cfg.hidden_size, dtype=torch.float64),
                        None,
                        rotary_pos_emb=(emb(p.max_seqlen_q).double(),) * 2,
                        packed_seq_params=p,
                    )
                    out["unhooked_fails"] = False
                except RuntimeError:
                    out["unhooked_fails"] = True
    sched.close()
    ps.destroy_model_parallel()
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def _rope_whole(x, freqs):
    from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_bshd

    return _apply_rotary_pos_emb_bshd(x.unsqueeze(1), freqs[: x.shape[0]]).squeeze(1)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("megatron")
    mp.spawn(_worker, args=(str(out_dir),), nprocs=WORLD, join=True)
    return [torch.load(out_dir / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


def _plan(b):
    return toy_scheduler(WORLD).plan(BATCHES[b])


def test_tp2_grid_keeps_tp_coordinates_apart(results):
    for r in results:
        a = r["tp2"]
        assert a["coordinates"] == [(0, 2), (1, 3)]  # Megatron order tp-cp-ep-dp-pp
        assert a["plan_rank"] == r["rank"] // 2
        expected = [0, 2] if a["tp_rank"] == 0 else [1, 3]
        assert a["members"] == expected  # CP group never mixes TP ranks
        assert a["sum"] == sum(expected)  # and it works (all-reduce)


def test_micro_batch_count_and_membership_follow_the_plan(results):
    for b in range(len(BATCHES)):
        plan = _plan(b)
        for r in results:
            steps = [s for s in r["steps"] if s["batch"] == b]
            assert len(steps) == len(plan.micro_batches)
            assert all(s["n"] == len(plan.micro_batches) for s in steps)
            for j, mb in enumerate(plan.micro_batches):
                s = steps[j]
                g = [g for g in mb.groups if r["rank"] in g.ranks]
                assert s["is_psp"] and s["qkv_format"] == "thd" and s["has_group"]
                if not g:  # idle rank: degree 1 in its own one-rank group, nothing counted
                    assert s["local_cp_size"] == 1 and not any(s["loss_mask"])
                    assert s["members"] == [r["rank"]] and s["cp_rank"] == 0
                    continue
                ranks = sorted(g[0].ranks)
                assert s["members"] == ranks  # cp_group membership
                assert s["local_cp_size"] == len(ranks)
                assert s["cp_rank"] == ranks.index(r["rank"])  # rank within the group
                lens = [BATCHES[b][i] for i in g[0].sequences]
                # Megatron 0.19.2's convention (pretrain_gpt.py, forward_step):
                # cu_seqlens_q holds the padded boundaries as well.
                assert s["cu"] == s["cu_padded"]
                padded = [s["cu_padded"][k + 1] - s["cu_padded"][k] for k in range(len(lens))]
                d = len(ranks)
                if d == 1:
                    assert padded == lens  # no padding without CP
                else:  # TE's divisibility, minimal
                    assert all(
                        p % (2 * d) == 0 and 0 <= p - n < 2 * d for p, n in zip(padded, lens)
                    )
                assert s["max_seqlen"] == max(padded)


def test_every_token_once_at_its_global_position(results):
    """Oracle: each real token of each sequence appears exactly once over the
    ranks of its group, with position_ids = its position in the sequence."""
    for b in range(len(BATCHES)):
        seen = {}
        for r in results:
            for s in (s for s in r["steps"] if s["batch"] == b):
                for t, m, pos in zip(s["tokens"], s["loss_mask"], s["position_ids"]):
                    if m:
                        i = (t - 100000 * b) // 1000
                        assert (t - 100000 * b) % 1000 == pos
                        seen.setdefault((i, pos), []).append(r["rank"])
        expected = {(i, p) for i, n in enumerate(BATCHES[b]) for p in range(n)}
        assert set(seen) == expected
        assert all(len(v) == 1 for v in seen.values())


def test_shard_layout_is_te_thd_rule(results):
    """TE's rule re-derived by reshaping: the padded sequence viewed as
    [2d, n/(2d)], rows r and 2d-1-r."""
    for r in results:
        for s in r["steps"]:
            d = s["local_cp_size"]
            off = 0
            for k in range(len(s["cu_padded"]) - 1):
                n = s["cu_padded"][k + 1] - s["cu_padded"][k]
                if d == 1:
                    assert s["position_ids"][off : off + n] == list(range(n))
                    off += n
                    continue
                rows = torch.arange(n).view(2 * d, n // (2 * d))
                want = torch.cat([rows[s["cp_rank"]], rows[2 * d - 1 - s["cp_rank"]]]).tolist()
                assert s["position_ids"][off : off + n // d] == want
                off += n // d


def test_rope_positions_follow_the_micro_batch_group(results):
    checked = [s for r in results for s in r["steps"] if "rope_err" in s]
    assert checked and min(s["local_cp_size"] for s in checked) >= 2
    for s in checked:
        assert s["rope_err"] < 1e-12
        assert s["attn_rope_err"] < 1e-12  # the real SelfAttention, hooked
        assert s["pg_restored"]


def test_attention_layers_hooked_and_needed(results):
    for r in results:
        assert r["hooked"] == 1
        assert r["prepare_error"].startswith("prepare_model: fcp.megatron needs TransformerEngine")
    assert any(r["unhooked_fails"] for r in results)


def test_per_token_loss_over_the_global_batch(results):
    """Oracle: the mean per-token loss over all real tokens of all global
    batches, computed in one process."""
    tokens = torch.cat(
        [sample(b, i, n)["tokens"] for b, lens in enumerate(BATCHES) for i, n in enumerate(lens)]
    )
    expected = float(token_loss(tokens).mean())
    for r in results:
        assert r["global_tokens"] == sum(map(sum, BATCHES))
        assert abs(r["global_loss"] - expected) < 1e-12
    # The oracle has teeth: averaging per micro-batch means (what a per-group
    # normalisation gives) is measurably different.
    means = [s["loss"] / s["num_tokens"] for r in results for s in r["steps"] if s["num_tokens"]]
    assert abs(sum(means) / len(means) - expected) > 1e-3


def test_same_interface_output_as_megatrons_scheduler(results):
    """Both answers: per micro-batch, one list per DP x CP rank; every sample
    in exactly one micro-batch, held by a contiguous run of ranks."""
    for name in ("megatron", "fcp"):
        groups = results[0]["interface"][name]
        where = {}
        for j, per_rank in enumerate(groups):
            assert len(per_rank) == WORLD
            for p, ids in enumerate(per_rank):
                for i in ids:
                    where.setdefault(i, []).append((j, p))
        assert sorted(where) == list(range(len(BATCHES[0]))), name
        for i, spots in where.items():
            assert len({j for j, _ in spots}) == 1, (name, i)
            ranks = [p for _, p in spots]
            assert ranks == list(range(ranks[0], ranks[0] + len(ranks))), (name, i)


def test_every_rank_learns_the_same_coefficients(results):
    # FcpMegatronLoader.observe gathers every rank's micro-batch times, so the
    # calibration (and with it every later plan, which verify=True checks)
    # is identical on all ranks.
    first = results[0]["calibration"]
    assert len(first) == len(BATCHES) and all(c["groups"] > 0 for c in first)
    for r in results[1:]:
        assert r["calibration"] == first


def test_ranks_that_disagree_on_the_plan_all_stop(results):
    assert all(r["disagreement_raised"] for r in results)


def test_planning_overlaps_and_is_logged(results):
    for r in results:
        assert len(r["exposed_s"]) == len(BATCHES) and len(r["planning_s"]) == len(BATCHES)
        assert all(x >= 0 for x in r["exposed_s"] + r["planning_s"])
