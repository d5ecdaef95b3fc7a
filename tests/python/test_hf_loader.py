"""fcp.hf without torch.distributed: the loader's packing (positions, labels
across shards, cu_seqlens) against an oracle that rebuilds every sequence
from all ranks' shards, the attention registered with transformers at
degree 1 against SDPA on each sequence, and the errors."""

import random
from types import SimpleNamespace

import pytest
import torch  # the project venv has torch and transformers: missing = failure
import transformers  # noqa: F401

import fcp
import fcp.hf as fh
import fcp.torch as ft


def chunk(s, d, c):
    """The zigzag chunk formula of docs/python.md, written out again."""
    return range(c * s // (2 * d), (c + 1) * s // (2 * d))


def oracle_positions(s, d, i):
    return list(chunk(s, d, i)) + list(chunk(s, d, 2 * d - 1 - i))


def random_batch(rng, n, vocab=50):
    return [[rng.randrange(vocab) for _ in range(rng.randint(1, 23))] for _ in range(n)]


def test_shifted_labels_predict_the_next_token_and_keep_ignored_targets():
    assert fh.shifted_labels([5, 6, 7]) == [6, 7, -100]
    assert fh.shifted_labels([5, 6, 7, 8], [-100, -100, 7, 8]) == [-100, 7, 8, -100]
    assert fh.shifted_labels([9]) == [-100]
    with pytest.raises(ValueError, match="labels: has 2 entries, input_ids 3"):
        fh.shifted_labels([1, 2, 3], [1, 2])


@pytest.mark.parametrize("degree", [1, 2, 3, 4])
def test_shards_of_all_ranks_rebuild_every_sequence_with_its_labels(degree):
    rng = random.Random(degree)
    batch = random_batch(rng, 6)
    ranks = rng.sample(range(7), degree)  # ring order need not ascend
    sequences = [4, 0, 5, 2]  # the group's order, not sorted
    seen = {}
    for i, rank in enumerate(ranks):
        mb = fh.pack_micro_batch(batch, sequences, ranks, rank)
        assert mb.context.cu_seqlens == tuple(
            [0] + [sum(len(batch[j]) for j in sequences[: k + 1]) for k in range(len(sequences))]
        )
        assert mb.context.group.ranks == tuple(ranks)
        offset = 0
        for j in sequences:
            s = len(batch[j])
            pos = oracle_positions(s, degree, i)
            n = len(pos)
            assert mb.position_ids[0, offset : offset + n].tolist() == pos
            for t, p in enumerate(pos):
                key = (j, p)
                assert key not in seen, "a token on two ranks"
                seen[key] = (int(mb.input_ids[0, offset + t]), int(mb.labels[0, offset + t]))
            offset += n
        assert offset == mb.num_tokens
    for j in sequences:
        seq = batch[j]
        for p in range(len(seq)):
            want_label = seq[p + 1] if p + 1 < len(seq) else -100
            assert seen.pop((j, p)) == (seq[p], want_label)
    assert not seen


def test_label_of_a_chunk_end_is_the_first_token_of_another_ranks_chunk():
    seq = list(range(100, 112))  # 12 tokens on 3 ranks: chunks of 2
    mb0 = fh.pack_micro_batch([seq], [0], [0, 1, 2], 0)
    # ring index 0 holds positions 0, 1 (chunk 0) and 10, 11 (chunk 5); the
    # successor of position 1 (position 2) lives on ring index 1.
    assert mb0.position_ids[0].tolist() == [0, 1, 10, 11]
    assert mb0.labels[0].tolist() == [101, 102, 111, -100]


def test_dict_examples_with_labels_and_plan_length():
    batch = [
        {"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4], "plan_length": 4096},
        {"input_ids": torch.tensor([7, 8])},
    ]
    ex = fh._examples(batch)
    assert [e.plan_length for e in ex] == [4096, 2]
    assert [e.num_targets for e in ex] == [2, 1]
    mb = fh.pack_micro_batch(batch, [0, 1], [3], 3)
    assert mb.labels[0].tolist() == [-100, 3, 4, -100, 8, -100]


@pytest.mark.parametrize(
    "bad, message",
    [
        ([], "batch: must not be empty"),
        ([[1, 2], {"ids": [1]}], r"batch\[1\].input_ids: missing"),
        ([[1, 2], []], r"batch\[1\]: empty sequence"),
        ([[1, 2.5]], r"batch\[0\]\[1\]: must be an integer token id"),
        ([{"input_ids": [1, 2], "labels": [1]}], r"batch\[0\].labels: has 1 entries"),
        ([{"input_ids": [1, 2], "plan_length": 0}], r"batch\[0\].plan_length: must be an integer"),
        (
            [{"input_ids": [1, 2], "vision_tokens": 3}],
            r"batch\[0\].vision_tokens: must be an integer in \[0, 2\], got 3",
        ),
        (
            [{"input_ids": [1], "plan_length": 9, "vision_tokens": -1}],
            r"batch\[0\].vision_tokens: must be an integer in \[0, 9\]",
        ),
        (["abc"], r"batch\[0\]: must be a list of token ids"),
    ],
)
def test_bad_examples_name_the_field(bad, message):
    with pytest.raises(ValueError, match=message):
        fh._examples(bad)


def test_idle_micro_batch_is_one_token_without_target():
    mb = fh.idle_micro_batch(3)
    assert mb.idle and mb.num_tokens == 1 and mb.labels.tolist() == [[-100]]
    assert mb.context.group.ranks == (3,) and mb.context.cu_seqlens == (0, 1)


def test_layout_marks_degrees_and_all_to_all():
    ring, a2a = fcp.CommKind.RING, fcp.CommKind.ALL_TO_ALL
    plan = SimpleNamespace(
        micro_batches=[
            SimpleNamespace(groups=[SimpleNamespace(degree=4, comm=ring)]),
            SimpleNamespace(groups=[SimpleNamespace(degree=d, comm=ring) for d in (2, 1, 1)]),
            SimpleNamespace(groups=[SimpleNamespace(degree=4, comm=a2a)]),
        ]
    )
    assert fh.layout(plan) == "[4] [2,1,1] [4u]"


def no_groups():
    return ft.GroupCache(new_group=lambda ranks: None, destroy_group=lambda pg: None)


def test_loader_covers_the_plan_on_every_rank():
    rng = random.Random(7)
    batches = [random_batch(rng, 9) for _ in range(3)]
    sched = fcp.Scheduler(cluster=fcp.Cluster(4, 2, "h100-8x8"), model="qwen3-1.7b")
    per_rank = [
        list(fh.PackedLoader(batches, sched, rank=r, cache=no_groups(), verify=False))
        for r in range(4)
    ]
    for b, batch in enumerate(batches):
        plan = sched.plan([len(x) for x in batch])
        targets = sum(len(x) - 1 for x in batch)
        for r in range(4):
            got = per_rank[r][b]
            assert got.plan.to_dict()["micro_batches"] == plan.to_dict()["micro_batches"]
            assert got.global_num_tokens == targets
            assert len(got.micro_batches) == len(plan.micro_batches)
        for m, mb in enumerate(plan.micro_batches):
            held = sorted(j for r in range(4) for j in per_rank[r][b].micro_batches[m].sequences)
            assert held == sorted(j for g in mb.groups for j in g.sequences for _ in g.ranks)
            for r in range(4):
                idle = all(r not in g.ranks for g in mb.groups)
                assert per_rank[r][b].micro_batches[m].idle == idle
        assert sum(per_rank[r][b].local_num_tokens for r in range(4)) == sum(map(len, batch))


def test_loader_plans_in_the_background_the_same_as_in_the_foreground():
    rng = random.Random(3)
    batches = [random_batch(rng, 5) for _ in range(4)]
    sched = fcp.Scheduler(cluster=fcp.Cluster(2, 2, "h100-8x8"), model="qwen3-1.7b")
    runs = [
        list(
            fh.PackedLoader(
                iter(batches), sched, rank=1, cache=no_groups(), verify=False, background=bg
            )
        )
        for bg in (True, False)
    ]
    assert len(runs[0]) == len(runs[1]) == 4
    for a, b in zip(*runs):
        assert a.plan.to_dict()["micro_batches"] == b.plan.to_dict()["micro_batches"]
        for x, y in zip(a.micro_batches, b.micro_batches):
            assert torch.equal(x.input_ids, y.input_ids) and torch.equal(x.labels, y.labels)


class _Recording:
    """fcp.Scheduler that records the communicators each plan is told."""

    def __init__(self, inner, plan=None):
        self.inner, self.cluster, self.told, self._plan = inner, inner.cluster, [], plan
        self.charges_communicators = inner.charges_communicators

    def plan(self, lengths, existing_communicators=None):
        self.told.append(existing_communicators)
        if self._plan is not None:
            return self._plan
        return self.inner.plan(lengths, existing_communicators=existing_communicators)


@pytest.mark.parametrize("background", [True, False])
def test_loader_tells_the_planner_the_groups_its_cache_holds(background):
    # With communicators= the Scheduler charges new groups; the loader tells
    # each plan the rank sets its GroupCache holds when the plan is asked for:
    # none for the first batch, then what the batches before made.
    batches = [
        [[7] * n for n in lengths]
        for lengths in ([60000, 4000, 300, 200, 100], [30000, 30000, 500, 20], [120000, 10, 10])
    ]
    cluster = fcp.Cluster(4, 2, "h100-8x8")
    rec = _Recording(
        fcp.Scheduler(cluster=cluster, model="qwen3-1.7b", communicators={"create_s": 0.001})
    )
    cache = no_groups()
    held_after = []
    for _ in fh.PackedLoader(
        batches, rec, rank=0, cache=cache, verify=False, background=background
    ):
        held_after.append(cache.rank_sets())
    assert rec.told[0] == [] and rec.told[1:] == held_after[:2]
    assert any(held_after), "the batches must make groups of degree > 1"
    plain = _Recording(fcp.Scheduler(cluster=cluster, model="qwen3-1.7b"))
    list(fh.PackedLoader(batches, plain, rank=0, cache=no_groups(), verify=False))
    assert plain.told == [None] * 3  # a Scheduler without communicators: as before


def test_loader_checks_a_plan_it_did_not_make():
    # A custom scheduler's plan (e.g. read from JSON) is checked by the one
    # validator before any sequence is indexed: a ValueError naming the field.
    rng = random.Random(2)
    batch = random_batch(rng, 6)
    sched = fcp.Scheduler(cluster=fcp.Cluster(4, 2, "h100-8x8"), model="qwen3-1.7b")
    d = sched.plan([len(x) for x in batch]).to_dict()
    d["micro_batches"][0]["groups"][0]["sequences"][0] = 99
    bad = _Recording(sched, fcp.Plan.from_dict(d))
    with pytest.raises(ValueError, match=r"^plan\.micro_batches\[0\]\.groups\[0\]\.sequences"):
        next(iter(fh.PackedLoader([batch], bad, rank=0, cache=no_groups(), verify=False)))


def vision_batch():
    """Four examples of a few real tokens, costed as long multimodal ones."""
    return [
        {"input_ids": [7] * 5, "plan_length": 60000, "vision_tokens": 50000},
        {"input_ids": [8] * 3, "plan_length": 4000},
        {"input_ids": [9] * 4, "plan_length": 3000, "vision_tokens": 3000},
        [5, 6],
    ]


def test_loader_plans_and_learns_with_the_vision_tokens_given():
    # Examples may say how many of their tokens are image or frame tokens; the
    # loader plans (and observe learns) with them, as Scheduler.plan(...,
    # vision_tokens=) and Scheduler.observe(..., vision_tokens=) do.
    cluster = fcp.Cluster(1, 1, "h100-8x8")
    sched = fcp.Scheduler(cluster=cluster, model="internvl3-2b")
    loader = fh.PackedLoader(
        [vision_batch()], sched, rank=0, cache=no_groups(), verify=False, background=False
    )
    (gb,) = list(loader)
    lengths, visions = [60000, 4000, 3000, 2], [50000, 0, 3000, 0]
    assert gb.plan_lengths == lengths and gb.plan_vision_tokens == visions
    want = fcp.Scheduler(cluster=cluster, model="internvl3-2b")
    assert gb.plan.est_ms == want.plan(lengths, vision_tokens=visions).est_ms
    assert gb.plan.est_ms > want.plan(lengths).est_ms  # the vision encoder is priced
    gb.micro_batch_times_s = [2.0 * mb.est_ms / 1000 for mb in gb.plan.micro_batches]
    times = [[t] for t in gb.micro_batch_times_s]  # one rank: one group each
    learnt = loader.observe(gb)
    assert learnt == want.observe(lengths, gb.plan, times, vision_tokens=visions)
    blind = fcp.Scheduler(cluster=cluster, model="internvl3-2b").observe(lengths, gb.plan, times)
    assert learnt != blind
    plain = fh.PackedLoader([[[1, 2]]], sched, rank=0, cache=no_groups(), verify=False)
    assert next(iter(plain)).plan_vision_tokens is None  # none given: asked as before


def test_loader_refuses_a_rank_outside_the_plan():
    sched = fcp.Scheduler(cluster=fcp.Cluster(2, 2, "h100-8x8"), model="qwen3-1.7b")
    with pytest.raises(ValueError, match="rank: 2 is not a rank of the 2-rank plan"):
        fh.PackedLoader([], sched, rank=2, cache=no_groups())


def test_global_batches_groups_an_iterable():
    assert list(fh.global_batches(range(5), 2)) == [[0, 1], [2, 3], [4]]
    assert list(fh.global_batches(range(5), 2, drop_last=True)) == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="size: must be an integer >= 1"):
        list(fh.global_batches(range(5), 0))


def tiny_qwen3(attn, **extra):
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        tie_word_embeddings=False,
        **extra,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation=attn).double()


def test_packed_degree_one_micro_batch_matches_sdpa_per_sequence():
    rng = random.Random(11)
    batch = random_batch(rng, 4, vocab=64)
    model = tiny_qwen3(fh.register())
    ref = tiny_qwen3("sdpa")
    ref.load_state_dict(model.state_dict())
    mb = fh.pack_micro_batch(batch, [2, 0, 3, 1], [0], 0)
    logits = model(**mb.model_inputs()).logits[0]
    offset = 0
    for j in [2, 0, 3, 1]:
        want = ref(input_ids=torch.tensor([batch[j]]), use_cache=False).logits[0]
        got = logits[offset : offset + len(batch[j])]
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-10)
        offset += len(batch[j])


def test_attention_refuses_what_it_does_not_implement():
    name = fh.register()
    mb = fh.pack_micro_batch([[1, 2, 3]], [0], [0], 0)
    with pytest.raises(ValueError, match="fcp_context: the 'fcp' attention needs"):
        tiny_qwen3(name)(input_ids=mb.input_ids, position_ids=mb.position_ids, use_cache=False)
    with pytest.raises(ValueError, match="sliding_window"):
        tiny_qwen3(
            name, use_sliding_window=True, sliding_window=2, layer_types=["sliding_attention"] * 2
        )(**mb.model_inputs())
    model = tiny_qwen3(name, attention_dropout=0.1)
    model.train()
    with pytest.raises(ValueError, match="attention dropout: not supported"):
        model(**mb.model_inputs())
    with pytest.raises(ValueError, match="attention_mask: padding masks are not supported"):
        tiny_qwen3(name)(**mb.model_inputs(), attention_mask=torch.tensor([[1, 1, 0]]))


def test_train_step_in_one_process_gives_the_global_per_token_loss_and_gradients():
    rng = random.Random(5)
    batch = random_batch(rng, 5, vocab=64)
    batch[2] = [7]  # one token: no target at all
    sched = fcp.Scheduler(cluster=fcp.Cluster(1, 1, "h100-8x8"), model="qwen3-1.7b")
    loader = fh.PackedLoader([batch], sched, rank=0, cache=no_groups(), verify=False)
    (gb,) = list(loader)
    with pytest.raises(ValueError, match="batch: has no micro_batch_times_s"):
        loader.observe(gb)
    model = tiny_qwen3(fh.register())
    ref = tiny_qwen3("sdpa")
    ref.load_state_dict(model.state_dict())
    loss = fh.train_step(model, gb)
    targets = sum(len(x) - 1 for x in batch)
    assert gb.global_num_tokens == targets
    want = 0.0
    for seq in batch:
        logits = ref(input_ids=torch.tensor([seq]), use_cache=False).logits[0]
        if len(seq) > 1:
            term = (
                torch.nn.functional.cross_entropy(
                    logits[:-1], torch.tensor(seq[1:]), reduction="sum"
                )
                / targets
            )
            term.backward()
            want += float(term.detach())
    assert loss == pytest.approx(want, rel=1e-12)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-9, atol=1e-12), name
    assert len(gb.micro_batch_times_s) == len(gb.plan.micro_batches)
    assert all(t > 0 for t in gb.micro_batch_times_s)
    learnt = loader.observe(gb)
    assert learnt["groups"] == sum(len(mb.groups) for mb in gb.plan.micro_batches)
    assert sched.calibration is learnt
