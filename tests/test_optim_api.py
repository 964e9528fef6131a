"""The optimizer contract of cutlass_ext.optim on the CPU: argument errors, groups, schedulers, state dicts, and
reproducible stochastic rounding whatever the grouping, order or sharding of the parameters."""

import copy

import numpy as np
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
        ({"seed": True}, "seed=True"),
        ({"lr": float("inf")}, "lr=inf"),
        ({"lr": torch.tensor(float("inf"))}, "lr=inf"),
        ({"weight_decay": float("inf")}, "weight_decay=inf"),
        ({"weight_decay": True}, "weight_decay=True"),
    ],
)
def test_bad_arguments_name_themselves(make, kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        make(_params(0), **{"lr": 0.1, **kwargs})


@pytest.mark.parametrize(
    "make, kwargs, argument",
    [
        (SGD, {"momentum": float("inf")}, "momentum=inf"),
        (SGD, {"dampening": True}, "dampening=True"),
        (SGD, {"dampening": float("nan")}, "dampening=nan"),
        (SGD, {"momentum": 0.9, "nesterov": "no"}, "nesterov='no'"),
        (SGD, {"momentum": 0.9, "nesterov": 1}, "nesterov=1"),
        (AdamW, {"eps": float("inf")}, "eps=inf"),
        (AdamW, {"eps": True}, "eps=True"),
        (AdamW, {"betas": 0.9}, "betas=0.9"),
        (AdamW, {"betas": (0.9,)}, "betas"),
        (AdamW, {"betas": (True, 0.999)}, "betas"),
    ],
)
def test_bad_constructor_arguments_of_one_optimizer(make, kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        make(_params(0), **{"lr": 0.1, **kwargs})


def test_a_device_tensor_lr_is_not_read():
    """Only a CPU tensor lr is inspected: reading a CUDA one would wait for its stream (a meta one stands in)."""
    optimizer = SGD(_params(0), lr=torch.empty((), device="meta"))
    assert optimizer.param_groups[0]["lr"].device.type == "meta"


# group hyperparameters the constructors' checks refuse, and the key each error names
BAD_GROUPS = [
    (SGD, {"momentum": -1}, "momentum=-1"),
    (SGD, {"dampening": 7}, "dampening=7"),
    (SGD, {"nesterov": True}, "nesterov"),
    (SGD, {"momentum": 0.9, "nesterov": "yes"}, "nesterov='yes'"),
    (SGD, {"arithmetic": "bogus"}, "arithmetic='bogus'"),
    (SGD, {"update": "bogus"}, "update='bogus'"),
    (SGD, {"seed": -5}, "seed=-5"),
    (SGD, {"seed": 2**70}, "seed"),
    (SGD, {"lr": float("inf")}, "lr=inf"),
    (SGD, {"weight_decay": float("nan")}, "weight_decay=nan"),
    (SGD, {"capturable": "yes"}, "capturable='yes'"),
    (AdamW, {"betas": (2.0, 3.0)}, "betas"),
    (AdamW, {"betas": (0.9,)}, "betas"),
    (AdamW, {"betas": 0.9}, "betas=0.9"),
    (AdamW, {"eps": -1}, "eps=-1"),
    (AdamW, {"eps": 0}, "eps=0"),
    (AdamW, {"eps": float("nan")}, "eps=nan"),
    (AdamW, {"weight_decay": float("nan")}, "weight_decay=nan"),
    (AdamW, {"seed": True}, "seed=True"),
]


@pytest.mark.parametrize("make, group, argument", BAD_GROUPS)
def test_bad_group_in_the_params_list_names_its_key(make, group, argument):
    params = _params(0)
    with pytest.raises(ValueError, match=argument):
        make([{"params": params[:1]}, {"params": params[1:], **group}], lr=0.1)


@pytest.mark.parametrize("make, group, argument", BAD_GROUPS)
def test_bad_group_added_names_its_key_and_is_not_added(make, group, argument):
    params = _params(0)
    optimizer = make(params[:1], lr=0.1)
    with pytest.raises(ValueError, match=argument):
        optimizer.add_param_group({"params": params[1:], **group})
    assert len(optimizer.param_groups) == 1


def test_refused_param_group_leaves_param_groups_unchanged():
    bf16 = torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))
    fp16 = torch.nn.Parameter(torch.zeros(4, dtype=torch.float16))
    optimizer = SGD([bf16], lr=0.1)
    with pytest.raises(TypeError, match="params"):
        optimizer.add_param_group({"params": [fp16]})
    assert len(optimizer.param_groups) == 1
    # the refused group's params are not held: the same group with a good param is accepted
    other = torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))
    optimizer.add_param_group({"params": (p for p in [other]), "lr": 0.5})  # an iterator: read once for both checks
    assert optimizer.param_groups[1]["params"] == [other] and optimizer.param_groups[1]["lr"] == 0.5
    bf16.grad, other.grad = torch.ones_like(bf16), torch.ones_like(other)
    optimizer.step()
    assert torch.all(bf16 == -0.1) and torch.all(other == -0.5)


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


@pytest.mark.parametrize(
    "lr",
    [-0.1, float("inf"), torch.tensor(float("nan")), 1e39, torch.tensor([[0.1]]), torch.tensor(True), torch.tensor(1j)],
)
def test_bad_lr_from_a_scheduler_or_group_edit_is_refused(lr):
    params = _params(0)
    optimizer = SGD(params, lr=0.1)
    optimizer.param_groups[0]["lr"] = lr
    params[0].grad = torch.ones_like(params[0])
    before = params[0].detach().clone()
    with pytest.raises(ValueError, match="lr"):
        optimizer.step()
    assert torch.equal(params[0], before)


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


def _set(where: str, key, value):
    """A corruption of a state dict: `state_dict[where][key] = value` (where: "state:<index>" or "group:<index>")."""

    def corrupt(state_dict):
        part, index = where.split(":")
        entry = state_dict["state" if part == "state" else "param_groups"][int(index)]
        if value is _DROP:
            del entry[key]
        else:
            entry[key] = value

    return corrupt


_DROP = object()
# a corruption of a saved kahan state dict (3 params, one group), and what the error says
BAD_STATE_DICTS = {
    "a missing state tensor": (_set("state:0", "compensation", _DROP), r"state\[0\] lacks keys \['compensation'\]"),
    "a missing step": (_set("state:2", "step", _DROP), r"state\[2\] lacks keys \['step'\]"),
    "an extra key": (_set("state:1", "extra", torch.zeros(1)), r"state\[1\] has unexpected keys \['extra'\]"),
    "a state tensor of another shape": (
        _set("state:0", "compensation", torch.zeros(3, dtype=torch.bfloat16)),
        r"state\[0\]\['compensation'\] must be a contiguous torch.bfloat16 tensor of shape \(17, 9\)",
    ),
    "a non-contiguous state tensor": (
        _set("state:0", "compensation", torch.zeros(9, 17, dtype=torch.bfloat16).t()),
        r"state\[0\]\['compensation'\] .* got a non-contiguous",
    ),
    "a state tensor that is no tensor": (_set("state:1", "compensation", 0.0), r"state\[1\]\['compensation'\]"),
    "a negative step": (_set("state:1", "step", torch.tensor(-1.0)), r"state\[1\]\['step'\]=-1.0"),
    "a fractional step": (_set("state:1", "step", torch.tensor(1.5)), r"state\[1\]\['step'\]=1.5"),
    "a step that is no tensor": (_set("state:1", "step", 2), r"state\[1\]\['step'\] must be a one-element"),
    "a bad rng_key": (_set("state:0", "rng_key", -1), r"state\[0\]\['rng_key'\]=-1"),
    "a bad element_offset": (_set("state:0", "element_offset", 0.5), r"state\[0\]\['element_offset'\]=0.5"),
    "a state that is no dict": (lambda sd: sd["state"].update({0: [1.0]}), r"state\[0\] must be a dict"),
    "state for no held param": (lambda sd: sd["state"].update({99: {}}), "no group holds"),
    "a group lacking a key": (_set("group:0", "seed", _DROP), r"param_groups\[0\] lacks \['seed'\]"),
    "a bad group update": (_set("group:0", "update", "bogus"), r"param_groups\[0\]: update='bogus'"),
    "a non-finite group weight_decay": (
        _set("group:0", "weight_decay", float("nan")),
        r"param_groups\[0\]: weight_decay=nan",
    ),
    "a capturable group of CPU params": (_set("group:0", "capturable", True), r"param_groups\[0\]: capturable"),
}
KIND_BAD_STATE_DICTS = {
    "sgd": (_set("group:0", "momentum", -1), r"param_groups\[0\]: momentum=-1"),
    "adamw": (_set("group:0", "betas", (0.9,)), r"param_groups\[0\]: betas"),
}


def _kahan_state_dict(kind, seed=2):
    params = _params(seed)
    optimizer = OPTIMIZERS[kind](params, update="kahan", seed=77)
    _train(optimizer, params, _grads(params, seed + 1, 2))
    return copy.deepcopy(optimizer.state_dict())


def _assert_same_state_dict(a, b):
    assert a["param_groups"] == b["param_groups"] and a["state"].keys() == b["state"].keys()
    for index, state in a["state"].items():
        assert state.keys() == b["state"][index].keys()
        for key, value in state.items():
            other = b["state"][index][key]
            assert torch.equal(value, other) if torch.is_tensor(value) else value == other


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
@pytest.mark.parametrize("corruption", [*BAD_STATE_DICTS, "kind-specific"])
def test_bad_state_dict_is_refused_and_the_state_kept(kind, corruption):
    corrupt, message = KIND_BAD_STATE_DICTS[kind] if corruption == "kind-specific" else BAD_STATE_DICTS[corruption]
    saved = _kahan_state_dict(kind)
    corrupt(saved)
    params = _params(2)
    optimizer = OPTIMIZERS[kind](params, update="kahan", seed=77)
    _train(optimizer, params, _grads(params, 9, 1))  # a state of its own, which a refused load must keep
    groups, before = optimizer.param_groups, copy.deepcopy(optimizer.state_dict())
    with pytest.raises(ValueError, match=message):
        optimizer.load_state_dict(saved)
    assert optimizer.param_groups is groups
    _assert_same_state_dict(optimizer.state_dict(), before)
    _train(optimizer, params, _grads(params, 10, 1))  # and it still steps


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_loaded_step_is_placed_as_a_fresh_one(kind):
    """A step counter saved as another real dtype or shape (e.g. an integer tensor) loads as the FP32 scalar a
    first step makes, and training continues as from the original."""
    params = _params(2)
    grads = _grads(params, 3, 4)
    optimizer = OPTIMIZERS[kind](params, update="stochastic", seed=77)
    _train(optimizer, params, grads[:2])
    saved = copy.deepcopy(optimizer.state_dict())
    for state in saved["state"].values():
        state["step"] = state["step"].to(torch.int64).reshape(1)
    resumed_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    resumed = OPTIMIZERS[kind](resumed_params, update="stochastic", seed=77)
    resumed.load_state_dict(saved)
    step = resumed.state[resumed_params[0]]["step"]
    assert step.dtype == torch.float32 and step.shape == () and step.item() == 2
    _train(optimizer, params, grads[2:])
    _train(resumed, resumed_params, grads[2:])
    for a, b in zip(params, resumed_params):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_state_dict_before_any_step_loads(kind):
    """Before a first step a param's state is empty, or the stream set_rng_key gave it."""
    params = _params(2)
    optimizer = OPTIMIZERS[kind](params, update="stochastic")
    optimizer.set_rng_key(params[1], 7, element_offset=100)
    saved = copy.deepcopy(optimizer.state_dict())
    resumed_params = _params(2)
    resumed = OPTIMIZERS[kind](resumed_params, update="stochastic")
    resumed.load_state_dict(saved)
    assert resumed.state[resumed_params[1]] == {"rng_key": 7, "element_offset": 100}
    _train(resumed, resumed_params, _grads(resumed_params, 3, 1))
    assert resumed.state[resumed_params[1]]["rng_key"] == 7


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


def test_betas_in_any_sequence_and_numpy_numbers_are_taken():
    optimizer = AdamW(_params(0), betas=np.array([0.9, 0.99]), lr=np.float32(0.01))
    assert optimizer.defaults["betas"] == (0.9, 0.99)


@pytest.mark.parametrize("dampening", [0.0, 0.3])
def test_momentum_turned_on_later_starts_its_buffer_as_torch_does(dampening):
    """torch.optim.SGD makes the buffer at the first step with momentum and copies the gradient in (no dampening)."""
    ours, theirs = torch.tensor([1.0, -2.0, 3.0]), torch.tensor([1.0, -2.0, 3.0])
    optimizers = SGD([ours], lr=0.1, dampening=dampening), torch.optim.SGD([theirs], lr=0.1, dampening=dampening)
    for step in range(4):
        for optimizer, param in zip(optimizers, (ours, theirs)):
            optimizer.param_groups[0]["momentum"] = 0.9 if step >= 2 else 0.0
            param.grad = torch.tensor([0.5, 0.25, -1.0]) * (step + 1)
            optimizer.step()
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)


def test_state_of_settings_changed_since_loads_and_steps():
    """Momentum set to 0 and Kahan switched on mid-run: the state dict loads into a fresh optimizer and steps on."""
    param = torch.ones(3, dtype=torch.bfloat16)
    optimizer = SGD([param], lr=0.1, momentum=0.9)
    param.grad = torch.ones_like(param)
    optimizer.step()
    optimizer.param_groups[0].update(momentum=0.0, update="kahan")
    optimizer.step()
    assert {"momentum_buffer", "compensation"} <= optimizer.state[param].keys()
    fresh_param = param.detach().clone()
    fresh = SGD([fresh_param], lr=0.1, momentum=0.9)
    fresh.load_state_dict(copy.deepcopy(optimizer.state_dict()))  # torch shares tensors of equal dtype
    for opt, p in ((optimizer, param), (fresh, fresh_param)):
        p.grad = torch.full_like(p, 0.5)
        opt.step()
    assert torch.equal(fresh_param, param)


@pytest.mark.parametrize(
    "make, option",
    [
        (lambda group: AdamW([group], lr=0.1), {"maximize": True}),
        (lambda group: AdamW([group], lr=0.1), {"amsgrad": True}),
        (lambda group: AdamW([group], lr=0.1), {"decoupled_weight_decay": False}),
        (lambda group: SGD([group], lr=0.1), {"maximize": True}),
        (lambda group: SGD([group], lr=0.1), {"differentiable": True}),
    ],
)
def test_torch_options_not_offered_are_refused_in_a_group_and_by_hand(make, option):
    """torch honours these per group: stepping without them would train otherwise, silently."""
    (key, value), param = next(iter(option.items())), torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match=f"{key}={value!r}: cutlass_ext.optim.* does not offer it"):
        make({"params": [param], **option})
    optimizer = make({"params": [param], key: not value, "foreach": True})  # the value that means "off" is taken
    optimizer.param_groups[0][key] = value
    param.grad = torch.ones(3)
    with pytest.raises(ValueError, match=f"{key}={value!r}"):
        optimizer.step()
    assert torch.equal(param, torch.zeros(3))


def test_sgd_takes_torchs_positional_order_and_default_lr():
    param = torch.nn.Parameter(torch.zeros(3))
    group = SGD([param], 0.1, 0.9, 0.0, 1e-4).param_groups[0]  # lr, momentum, dampening, weight_decay as torch's
    assert (group["weight_decay"], group["nesterov"]) == (1e-4, False)
    assert SGD([param]).param_groups[0]["lr"] == torch.optim.SGD([param]).param_groups[0]["lr"]


def test_a_hand_edited_update_is_named_at_the_step():
    param = torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16))
    param.grad = torch.ones(3, dtype=torch.bfloat16)
    optimizer = AdamW([param])
    optimizer.param_groups[0]["update"] = "Kahan"
    with pytest.raises(ValueError, match="update='Kahan' is not one of"):
        optimizer.step()


def test_a_step_refused_in_a_later_group_changes_no_group():
    first, second = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(3))
    optimizer = AdamW([{"params": [first]}, {"params": [second]}], lr=0.1)
    optimizer.param_groups[1]["maximize"] = True
    first.grad, second.grad = torch.ones(3), torch.ones(3)
    with pytest.raises(ValueError, match="maximize=True"):
        optimizer.step()
    assert torch.equal(first, torch.zeros(3)) and first not in optimizer.state


def test_a_groups_table_is_uploaded_once_whatever_other_optimizers_cycle(monkeypatch):
    """A captured step must copy nothing from the host: the table an optimizer holds is the one its steps read,
    though the shared cache has moved on (another optimizer's OneCycleLR, or more groups than it keeps)."""
    from cutlass_ext.optim import reference

    groups = [{"params": [torch.nn.Parameter(torch.zeros(2))], "betas": (0.9, 0.99 - i * 1e-4)} for i in range(70)]
    optimizer = AdamW(groups, lr=0.01)

    def step():
        for group in optimizer.param_groups:
            group["params"][0].grad = torch.ones(2)
        optimizer.step()

    step()
    built = []
    make = reference.squares_table
    monkeypatch.setattr(reference, "squares_table", lambda *args: built.append(args) or make(*args))
    other = torch.nn.Parameter(torch.zeros(2))
    cycling = AdamW([other], lr=0.01)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(cycling, max_lr=0.1, total_steps=100)
    for _ in range(70):
        other.grad = torch.ones(2)
        cycling.step()
        scheduler.step()
    built.clear()
    step()
    step()
    assert built == []


def test_cycled_betas_keep_one_table_a_group():
    """A scheduler cycling beta1 (OneCycleLR) replaces the group's table each step; nothing accumulates."""
    from cutlass_ext.optim import reference

    param = torch.nn.Parameter(torch.zeros(3))
    optimizer = AdamW([param], lr=0.01)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=400)
    for _ in range(300):  # beta1 cycles: a new table each step
        param.grad = torch.ones(3)
        optimizer.step()
        scheduler.step()
    param.grad = torch.ones(3)
    optimizer.step()  # with the betas the scheduler set last
    ((betas, held),) = optimizer._beta_tables.values()
    assert betas == tuple(float(b) for b in optimizer.param_groups[0]["betas"])
    assert torch.equal(held, reference.squares_table(betas, param.device))


def test_load_post_hooks_run_only_for_a_load_that_is_kept():
    param = torch.nn.Parameter(torch.zeros(3))
    optimizer, seen = AdamW([param]), []
    optimizer.register_load_state_dict_post_hook(lambda opt: seen.append(opt))
    with pytest.raises(ValueError, match="state_dict: param_groups"):
        optimizer.load_state_dict(torch.optim.AdamW([param]).state_dict())
    assert seen == []
    optimizer.load_state_dict(AdamW([param]).state_dict())
    assert seen == [optimizer]
