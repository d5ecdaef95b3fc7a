"""fcp.megatron without Megatron: the adapter against a stand-in
parallel_state module that has Megatron-Core's globals and getters."""

import types

import pytest
import torch

import fcp.megatron as fm
import fcp.torch as ft


def _fake_parallel_state():
    ps = types.ModuleType("parallel_state")
    ps._CONTEXT_PARALLEL_GROUP = "static-cp"
    ps._CONTEXT_PARALLEL_GLOBAL_RANKS = [0, 1, 2, 3]
    # Megatron-Core's getters read the globals at call time, like these.
    ps.get_context_parallel_group = lambda: ps._CONTEXT_PARALLEL_GROUP
    ps.get_context_parallel_global_ranks = lambda: ps._CONTEXT_PARALLEL_GLOBAL_RANKS
    ps.get_context_parallel_world_size = lambda: len(ps._CONTEXT_PARALLEL_GLOBAL_RANKS)
    return ps


class _TEAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = []

    def set_context_parallel_group(self, group, ranks, stream):
        self.calls.append((group, list(ranks), stream))


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([_TEAttention(), torch.nn.Linear(2, 2), _TEAttention()])


def _adapter(rank):
    created = []
    cache = ft.GroupCache(new_group=lambda r: created.append(tuple(r)) or ("pg", tuple(r)))
    model = _Model()
    return fm.MegatronCPAdapter(model, parallel_state=_fake_parallel_state(), cache=cache,
                                rank=rank), model, created


def test_named_patch_points():
    assert fm.PATCHED_GLOBALS == ("_CONTEXT_PARALLEL_GROUP", "_CONTEXT_PARALLEL_GLOBAL_RANKS")
    assert "get_context_parallel_group" in fm.PATCHED_GETTERS
    assert fm.TE_SET_CP_GROUP == "set_context_parallel_group"


def test_swaps_cp_group_per_micro_batch_and_restores():
    adapter, model, created = _adapter(rank=2)
    ps = adapter.parallel_state
    plan = [[[0], [3, 1, 2]], [[0, 1], [2, 3]]]
    assert adapter.prepare(plan) == 4
    with adapter.use(plan[0]) as g:
        assert ps.get_context_parallel_group() == ("pg", (1, 2, 3))
        assert ps.get_context_parallel_global_ranks() == [1, 2, 3]  # sorted, as TE's ring expects
        assert ps.get_context_parallel_world_size() == 3
        assert g.index(2) == 1
    assert ps.get_context_parallel_group() == "static-cp"
    assert ps.get_context_parallel_global_ranks() == [0, 1, 2, 3]
    with adapter.use(plan[1]):
        assert ps.get_context_parallel_world_size() == 2
    attn = [m for m in model.modules() if isinstance(m, _TEAttention)]
    # Each TE module: pointed at the group, then back at the static one, twice.
    for m in attn:
        assert [c[1] for c in m.calls] == [[1, 2, 3], [0, 1, 2, 3], [2, 3], [0, 1, 2, 3]]
    assert created == [(0,), (0, 1), (2, 3), (1, 2, 3)]  # created once each


def test_restores_on_error():
    adapter, _, _ = _adapter(rank=0)
    with pytest.raises(RuntimeError):
        with adapter.use([[0, 1, 2, 3]]):
            raise RuntimeError("boom")
    assert adapter.parallel_state.get_context_parallel_group() == "static-cp"
    assert adapter.current is None


def test_shard_batch_zigzag_keeps_global_positions():
    adapter, _, _ = _adapter(rank=3)
    tokens = torch.arange(2 * 11).view(2, 11)
    batch = {"tokens": tokens, "position_ids": torch.arange(11).expand(2, 11),
             "attention_mask": None, "labels": tokens + 1}
    with pytest.raises(ValueError, match="group"):
        adapter.shard_batch(batch)
    with adapter.use([[1, 3]]) as g:
        out = adapter.shard_batch(batch, seq_dim=1)
    pos = ft.zigzag_positions(11, 2, g.index(3))
    assert torch.equal(out["position_ids"][0], pos)
    assert torch.equal(out["tokens"], tokens[:, pos])
    assert out["attention_mask"] is None


def test_pad_to_multiple():
    assert [fm.pad_to_multiple(s, 3) for s in (0, 1, 6, 7, 12)] == [0, 6, 6, 12, 12]
    with pytest.raises(ValueError):
        fm.pad_to_multiple(5, 0)


def test_without_megatron_installed():
    try:
        import megatron.core  # noqa: F401
        pytest.skip("Megatron-Core is installed")
    except ImportError:
        pass
    with pytest.raises(ImportError, match="Megatron"):
        fm.MegatronCPAdapter()
