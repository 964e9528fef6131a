"""The optimizer contract of cutlass_ext.optim on the CPU: argument errors, groups, schedulers, state dicts, and
reproducible stochastic rounding whatever the grouping, order or sharding of the parameters."""

import copy

import pytest
import torch

from cutlass_ext.optim import SGD, AdamW

OPTIMIZERS = {
    "sgd": lambda params, **kw: SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-3, **kw),
    "adamw": lambda params, **kw: AdamW(params, lr=1e-2, **kw),
}


def _params(seed, shapes=((17, 9), (40,), (3, 5, 7))):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(torch.bfloat16)) for s in shapes]


def _grads(params, seed, steps):
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(p.shape, generator=g).to(torch.bfloat16) for p in params] for _ in range(steps)]


def _train(optimizer, params, grads):
    for step_grads in grads:
        for p, grad in zip(params, step_grads):
            p.grad = grad.clone()
        optimizer.step()


@pytest.mark.parametrize("make", [SGD, AdamW])
@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"update": "round"}, "update"),
        ({"arithmetic": "fp16"}, "arithmetic"),
        ({"lr": -1.0}, "lr"),
        ({"lr": float("nan")}, "lr=nan"),
        ({"lr": torch.tensor(float("nan"))}, "lr=nan"),
        ({"lr": True}, "lr=True"),
        ({"weight_decay": float("nan")}, "weight_decay=nan"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**64}, "seed"),
    ],
)
def test_bad_arguments_name_themselves(make, kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        make(_params(0), **{"lr": 0.1, **kwargs})


def test_sgd_and_adamw_specific_errors():
    with pytest.raises(ValueError, match="nesterov"):
        SGD(_params(0), lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        AdamW(_params(0), betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="eps"):
        AdamW(_params(0), eps=0.0)
    with pytest.raises(ValueError, match="eps=nan"):
        AdamW(_params(0), eps=float("nan"))
    with pytest.raises(ValueError, match="betas"):
        AdamW(_params(0), betas=(float("nan"), 0.999))
    with pytest.raises(ValueError, match="momentum=nan"):
        SGD(_params(0), lr=0.1, momentum=float("nan"))
    with pytest.raises(TypeError, match="params"):
        SGD([torch.nn.Parameter(torch.zeros(3, dtype=torch.complex64))], lr=0.1)
    with pytest.raises(TypeError, match="params"):
        SGD([torch.nn.Parameter(torch.zeros(3, dtype=torch.float16))], lr=0.1)
    with pytest.raises(ValueError, match="capturable"):
        AdamW(_params(0), capturable=True)


def test_negative_lr_from_a_scheduler_or_group_edit_is_refused():
    params = _params(0)
    optimizer = SGD(params, lr=0.1)
    optimizer.param_groups[0]["lr"] = -0.1
    params[0].grad = torch.ones_like(params[0])
    with pytest.raises(ValueError, match="lr"):
        optimizer.step()


def test_sparse_grads_are_refused():
    param = torch.nn.Parameter(torch.zeros(4, 3))
    optimizer = AdamW([param])
    param.grad = torch.eye(4, 3).to_sparse()
    with pytest.raises(RuntimeError, match="grad: sparse"):
        optimizer.step()


def test_rng_key_arguments():
    params = _params(0)
    optimizer = AdamW(params, update="stochastic")
    with pytest.raises(ValueError, match="key"):
        optimizer.set_rng_key(params[0], 2**32)
    with pytest.raises(ValueError, match="element_offset"):
        optimizer.set_rng_key(params[0], 1, element_offset=-4)
    with pytest.raises(ValueError, match="param"):
        optimizer.set_rng_key(torch.nn.Parameter(torch.zeros(2)), 1)


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_none_grads_are_skipped(kind):
    params = _params(1)
    before = [p.detach().clone() for p in params]
    optimizer = OPTIMIZERS[kind](params, update="kahan")
    params[0].grad = torch.ones_like(params[0])
    optimizer.step()
    assert not torch.equal(params[0], before[0])
    for p, b in zip(params[1:], before[1:]):
        assert torch.equal(p, b) and "step" not in optimizer.state[p]
    assert optimizer.state[params[0]]["step"].item() == 1


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
@pytest.mark.parametrize("update", ["nearest", "stochastic", "kahan"])
def test_state_dict_round_trip(kind, update):
    params = _params(2)
    grads = _grads(params, 3, 6)
    optimizer = OPTIMIZERS[kind](params, update=update, seed=77)
    _train(optimizer, params, grads[:3])
    saved = copy.deepcopy(optimizer.state_dict())
    resumed_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    resumed = OPTIMIZERS[kind](resumed_params, update=update, seed=77)
    resumed.load_state_dict(saved)
    state = resumed.state[resumed_params[0]]
    assert state["step"].item() == 3
    assert ("compensation" in state) == (update == "kahan")
    if update == "kahan":
        assert state["compensation"].dtype == torch.bfloat16 and state["compensation"].abs().sum() > 0
    _train(optimizer, params, grads[3:])
    _train(resumed, resumed_params, grads[3:])
    for a, b in zip(params, resumed_params):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_bf16_states_and_memory(kind):
    params = _params(3)
    optimizer = OPTIMIZERS[kind](params, update="kahan")
    _train(optimizer, params, _grads(params, 4, 1))
    for p in params:
        state = optimizer.state[p]
        tensors = [v for k, v in state.items() if isinstance(v, torch.Tensor) and k != "step"]
        assert all(t.dtype == torch.bfloat16 and t.shape == p.shape for t in tensors)
        assert len(tensors) == (3 if kind == "adamw" else 2)


def test_param_groups_and_scheduler():
    """Each group its own lr; a scheduler's new lr reaches the next step (SGD, no momentum: w -= lr · g)."""
    a = torch.nn.Parameter(torch.zeros(8, dtype=torch.bfloat16))
    b = torch.nn.Parameter(torch.zeros(8, dtype=torch.bfloat16))
    optimizer = SGD([{"params": [a]}, {"params": [b], "lr": 0.25}], lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for _ in range(3):
        a.grad = torch.ones_like(a)
        b.grad = torch.ones_like(b)
        optimizer.step()
        scheduler.step()
    assert torch.all(a == -(1.0 + 0.5 + 0.25))
    assert torch.all(b == -(0.25 + 0.125 + 0.0625))


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_same_seed_same_weights_whatever_the_grouping_and_order(kind):
    """Stochastic rounding is keyed by (seed, step, param key, element), not by launch or group."""
    grads = _grads(_params(4), 5, 4)
    results = []
    for layout in ("one_group", "two_groups", "reversed"):
        params = _params(4)
        if layout == "one_group":
            optimizer = OPTIMIZERS[kind](params, update="stochastic", seed=9)
        elif layout == "two_groups":
            optimizer = OPTIMIZERS[kind]([{"params": params[:1]}, {"params": params[1:]}], update="stochastic", seed=9)
        else:
            optimizer = OPTIMIZERS[kind](params[::-1], update="stochastic", seed=9)
        for key, p in enumerate(params):
            optimizer.set_rng_key(p, 1000 + key)
        _train(optimizer, params, grads)
        results.append(params)
    for params in results[1:]:
        for a, b in zip(results[0], params):
            assert torch.equal(a, b)
    other = _params(4)
    optimizer = OPTIMIZERS[kind](other, update="stochastic", seed=10)
    _train(optimizer, other, grads)
    assert not all(torch.equal(a, b) for a, b in zip(results[0], other))


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_shards_draw_the_whole_tensors_numbers(kind):
    whole = torch.nn.Parameter(torch.randn(1001).to(torch.bfloat16))
    shards = [torch.nn.Parameter(whole.detach()[:403].clone()), torch.nn.Parameter(whole.detach()[403:].clone())]
    grads = [torch.randn(1001).to(torch.bfloat16) for _ in range(3)]
    whole_optimizer = OPTIMIZERS[kind]([whole], update="stochastic", seed=5)
    whole_optimizer.set_rng_key(whole, 42)
    shard_optimizers = [OPTIMIZERS[kind]([shard], update="stochastic", seed=5) for shard in shards]
    shard_optimizers[0].set_rng_key(shards[0], 42, element_offset=0)
    shard_optimizers[1].set_rng_key(shards[1], 42, element_offset=403)
    for grad in grads:
        whole.grad = grad.clone()
        whole_optimizer.step()
        for shard, optimizer, piece in zip(shards, shard_optimizers, (grad[:403], grad[403:])):
            shard.grad = piece.clone()
            optimizer.step()
    assert torch.equal(whole.detach(), torch.cat([s.detach() for s in shards]))


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_compiled_step_matches_eager(kind):
    grads = _grads(_params(6), 7, 3)
    eager_params, compiled_params = _params(6), _params(6)
    eager = OPTIMIZERS[kind](eager_params, update="stochastic", seed=3)
    compiled = OPTIMIZERS[kind](compiled_params, update="stochastic", seed=3)
    step = torch.compile(compiled.step, backend="aot_eager")
    for step_grads in grads:
        for p, q, grad in zip(eager_params, compiled_params, step_grads):
            p.grad, q.grad = grad.clone(), grad.clone()
        eager.step()
        step()
    for a, b in zip(eager_params, compiled_params):
        assert torch.equal(a, b)
