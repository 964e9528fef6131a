"""cutlass_ext under torch.distributed on CUDA (NCCL, spawned ranks, one GPU each): FSDP2-sharded BF16 params
stepped by the fused optimizer kernels end with one unsharded GPU's weights and states bit for bit, DCP resumes
them bit for bit, and DDP trains models of `ext.nn.Linear` (corrected modes), of torch's layers under
`ext.precision` and of `ext.lowbit` layers with identical replicas and the loss curve of one GPU on the whole
batch.

    python -m pytest -m gpu tests/gpu/test_distributed.py      # the 2-rank tests skip with fewer than 2 GPUs
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
from torch import nn

import cutlass_ext as ext
from cutlass_ext import lowbit
from tests.test_distributed_optim import (
    CASES,
    STEPS,
    assert_identical,
    fsdp_worker,
    spawn,
    unsharded_run,
)

pytestmark = pytest.mark.gpu
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")

ROWS, FEATURES, HIDDEN, OUTPUTS = 64, 96, 160, 24
LAYER_STEPS = 12
# per model: how close the 2-rank loss curve stays to one GPU's (the gradients differ by summation order only)
MODELS = {
    "halfhalf": 1e-4,  # FP32-accurate products: FP32 rounding
    "tf32tf32": 1e-4,
    "precision": 1e-4,  # torch's layers, products in halfhalf through ext.precision
    "lowbit": 2e-2,  # a weight that moved by one ulp can flip a floor of the 7-bit accumulator
}


class UnderPrecision(nn.Module):
    """`module` with its forward's float32 products routed through ext.gemm in `mode`."""

    def __init__(self, module: nn.Module, mode: str):
        super().__init__()
        self.module, self.mode = module, mode

    def forward(self, x):
        with ext.precision(self.mode):
            return self.module(x)


def layer_model(name: str, device) -> nn.Module:
    torch.manual_seed(0)
    if name == "precision":
        model = UnderPrecision(
            nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, OUTPUTS)), "halfhalf"
        )
    elif name == "lowbit":
        model = nn.Sequential(
            nn.Linear(FEATURES, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, OUTPUTS)
        )
        # every layer but the last accumulates in M7E4 (seed 002's default conversion)
        model = lowbit.convert(model, lowbit.LowbitConfig(lowbit.LowbitFormat.make(7, 4)))
    else:
        model = nn.Sequential(
            ext.nn.Linear(FEATURES, HIDDEN, mode=name), nn.GELU(), ext.nn.Linear(HIDDEN, OUTPUTS, mode=name)
        )
    return model.to(device)


def layer_data(device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    inputs = torch.randn(ROWS, FEATURES, generator=generator)
    return inputs.to(device), torch.randn(ROWS, OUTPUTS, generator=generator).to(device)


def fit(model, device, rows=slice(None)) -> list[float]:
    """SGD on the rows `rows` of the fixed batch; the losses of those rows per step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    inputs, targets = layer_data(device)
    losses = []
    for _ in range(LAYER_STEPS):
        loss = (model(inputs[rows]) - targets[rows]).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def layers_worker(rank: int, world: int, port: int, folder: str, device_type: str) -> None:
    """Per model: DDP training on this rank's half of the batch; rank 0 saves every rank's losses and weights."""
    from torch.nn.parallel import DistributedDataParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    try:
        results = {}
        for name in MODELS:
            model = DistributedDataParallel(layer_model(name, device), device_ids=[rank])
            losses = fit(model, device, slice(rank * ROWS // world, (rank + 1) * ROWS // world))
            weights = {key: value.detach().cpu() for key, value in model.module.state_dict().items()}
            gathered = [None] * world
            dist.all_gather_object(gathered, {"losses": losses, "weights": weights})
            results[name] = gathered
        if rank == 0:
            torch.save(results, os.path.join(folder, "results.pt"))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def fsdp_two_gpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nccl")
    return folder, spawn(fsdp_worker, 2, folder, "cuda")


@two_gpus
@pytest.mark.parametrize("kind, update", CASES)
def test_fsdp2_on_two_gpus_ends_with_one_gpus_weights_bit_for_bit(fsdp_two_gpus, kind, update):
    folder, results = fsdp_two_gpus
    run = results["fsdp"][kind, update]
    assert_identical(unsharded_run(kind, update, "cuda").weights, run["trained"], f"{kind} {update}")
    assert_identical(run["trained"], run["loaded"], "loaded")
    assert_identical(run["continued"], run["resumed"], "resumed on 2 GPUs")
    one_gpu = unsharded_run(kind, update, "cuda", STEPS, folder / f"{kind}_{update}")
    assert_identical(run["continued"], one_gpu.weights, "resumed on 1 GPU")
    first, second = results["ddp"][kind, update]
    assert_identical(first["weights"], second["weights"], "DDP replicas")


@pytest.fixture(scope="module")
def fsdp_one_gpu(tmp_path_factory):
    return spawn(fsdp_worker, 1, tmp_path_factory.mktemp("nccl1"), "cuda")


@pytest.mark.parametrize("kind, update", CASES)
def test_fsdp2_on_one_gpu_runs_the_kernels_on_local_shards(fsdp_one_gpu, kind, update):
    run = fsdp_one_gpu["fsdp"][kind, update]
    assert_identical(unsharded_run(kind, update, "cuda").weights, run["trained"], f"{kind} {update}")
    assert_identical(run["continued"], run["resumed"], "resumed")


@pytest.fixture(scope="module")
def ddp_layers(tmp_path_factory):
    return spawn(layers_worker, 2, tmp_path_factory.mktemp("layers"), "cuda")


@two_gpus
@pytest.mark.parametrize("name", sorted(MODELS))
def test_ddp_trains_cutlass_ext_layers_like_one_gpu(ddp_layers, name):
    first, second = ddp_layers[name]
    assert first["weights"].keys() == second["weights"].keys()
    for key, value in first["weights"].items():
        assert torch.equal(value, second["weights"][key]), f"replicas differ in {key}"
    losses = [(a + b) / 2 for a, b in zip(first["losses"], second["losses"])]
    one_gpu = fit(layer_model(name, "cuda"), "cuda")
    assert one_gpu[-1] < 0.95 * one_gpu[0]  # it trains
    assert losses == pytest.approx(one_gpu, rel=MODELS[name])
