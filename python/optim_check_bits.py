"""Where the fused CUDA optimizer kernels and the CPU reference part: for every optimizer setting x update x
arithmetic of tests/gpu/test_optim_kernel.py, train the same drawn weights 3 steps on the CPU (reference) and on
CUDA (kernels) and print how many elements of the params and states differ. For the first differing element, at
the first step where anything differs (so its inputs are still equal on both sides), print its inputs, the step
scalars computed on the CPU and on the device, the FP32 result of every operation of the reference update run on
the CPU and on CUDA tensors, and the kernel's outputs for that element alone and in the whole run.

    python python/optim_check_bits.py [--distribution normal|tiny|wide] [--steps 3]

Exit status 1 when any case differs.
"""

from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cutlass_ext.optim import kernel, reference
from tests.gpu.test_optim_kernel import DISTRIBUTIONS, SETTINGS, draw_case, train_from


def hex_of(value: float) -> str:
    return f"{value:.9g} (0x{struct.unpack('<I', struct.pack('<f', value))[0]:08x})"


def tensors_of(optimizer, params):
    """Each param and its state tensors (step counters excepted), by name."""
    named = []
    for i, p in enumerate(params):
        named.append((f"param {i}", p.detach()))
        for key, value in optimizer.state[p].items():
            if isinstance(value, torch.Tensor) and key != "step":
                named.append((f"{key} {i}", value))
    return named


def differing(cpu_tensors, gpu_tensors):
    """(count of differing elements, first (name, flat index) or None)."""
    count, first = 0, None
    for (name, a), (_, b) in zip(cpu_tensors, gpu_tensors):
        mask = a.cpu().view(torch.int16).flatten() != b.cpu().view(torch.int16).flatten()
        if mask.any() and first is None:
            first = (name, int(mask.nonzero()[0]))
        count += int(mask.sum())
    return count, first


def recorded_update(optimizer, group, state, element_inputs, index, device, scalars):
    """The reference update of one element on `device`: every operation's FP32 result (the reference rounds after
    each operation through reference._quantizer, which records here) and the element's new values."""
    results = []
    quantizer = reference._quantizer

    def recording(arithmetic):
        q = quantizer(arithmetic)

        def record(t):
            out = q(t)
            results.append(float(out.flatten()[0]))
            return out

        return record

    values = {name: t.reshape(1).to(device, copy=True) for name, t in element_inputs.items()}
    arithmetic = group["arithmetic"]
    rounding = reference.Rounding(group["update"], group["seed"], state["rng_key"], state["element_offset"] + index)
    reference._quantizer = recording
    try:
        optimizer._update_reference(
            values["param"],
            values["grad"],
            {k: v for k, v in values.items() if k not in ("param", "grad")},
            scalars.to(device),
            optimizer._constants(group, arithmetic),
            rounding,
            arithmetic,
        )
    finally:
        reference._quantizer = quantizer
    return results, {k: float(v[0]) for k, v in values.items() if k != "grad"}


def kernel_alone(optimizer, group, state, element_inputs, index, scalars):
    """The fused kernel on the element alone (one-element tensors, its own Philox stream position)."""
    values = {name: t.reshape(1).to("cuda", copy=True) for name, t in element_inputs.items()}
    names = optimizer._kernel_state_names(group)
    kernel.fused_step(
        optimizer._kind,
        [values["param"]],
        [values["grad"]],
        [[values[name]] for name in names],
        scalars.to("cuda").reshape(1, 4),
        optimizer._constants(group, group["arithmetic"]),
        group["update"],
        group["arithmetic"],
        group["seed"],
        [state["rng_key"]],
        [state["element_offset"] + index],
    )
    return {k: float(v[0]) for k, v in values.items() if k != "grad"}


def explain(name, update, arithmetic, distribution, steps):
    weights, grads = draw_case(name, update, arithmetic, distribution, steps)
    cpu_params, cpu_optimizer = train_from("cpu", name, update, arithmetic, weights, grads[:0])
    gpu_params, gpu_optimizer = train_from("cuda", name, update, arithmetic, weights, grads[:0])
    first_report = None
    for step, step_grads in enumerate(grads, start=1):
        before = [(n, t.clone()) for n, t in tensors_of(cpu_optimizer, cpu_params)]
        for params, optimizer in ((cpu_params, cpu_optimizer), (gpu_params, gpu_optimizer)):
            for p, grad in zip(params, step_grads):
                p.grad = grad.to(p.device, copy=True)
            optimizer.step()
        count, first = differing(tensors_of(cpu_optimizer, cpu_params), tensors_of(gpu_optimizer, gpu_params))
        if first is not None and first_report is None:
            first_report = (step, first, before, [g.clone() for g in step_grads])
    count, _ = differing(tensors_of(cpu_optimizer, cpu_params), tensors_of(gpu_optimizer, gpu_params))
    print(f"{name:13s} {update:10s} {arithmetic:4s}: {count} elements differ after {steps} steps", flush=True)
    if first_report is None:
        return 0
    step, (tensor_name, index), before, step_grads = first_report
    tensor = int(tensor_name.split()[-1])
    group = cpu_optimizer.param_groups[0]
    state = cpu_optimizer.state[cpu_params[tensor]]
    inputs = {"param": dict(before)[f"param {tensor}"].flatten()[index], "grad": step_grads[tensor].flatten()[index]}
    for key in cpu_optimizer._kernel_state_names(group):
        inputs[key] = dict(before)[f"{key} {tensor}"].flatten()[index]
    print(f"  first difference: step {step}, {tensor_name}, flat index {index}")
    print("  inputs: " + ", ".join(f"{k}={hex_of(float(v))}" for k, v in inputs.items()))
    rows = {}
    for device in ("cpu", "cuda"):
        step_tensor = torch.tensor([float(step)], device=device)
        rows[device] = reference.step_scalars(
            cpu_optimizer._kind, group["lr"], step_tensor, group.get("betas"), group["arithmetic"]
        )[0].cpu()
        print(f"  step scalars on {device:4s}: " + ", ".join(hex_of(float(v)) for v in rows[device]))
    traces = {}
    for device in ("cpu", "cuda"):
        traces[device] = recorded_update(cpu_optimizer, group, state, inputs, index, device, rows["cpu"])
    print("  reference operations (FP32 results, in order), CPU | CUDA tensors:")
    for k, (a, b) in enumerate(zip(traces["cpu"][0], traces["cuda"][0])):
        print(f"    op {k:2d}: {hex_of(a):32s} | {hex_of(b)}{'   <-- differ' if a != b else ''}")
    print(f"  reference new values on CPU:  {traces['cpu'][1]}")
    print(f"  reference new values on CUDA: {traces['cuda'][1]}")
    print(f"  kernel on the element alone:  {kernel_alone(gpu_optimizer, group, state, inputs, index, rows['cpu'])}")
    gpu_state = gpu_optimizer.state[gpu_params[tensor]]
    print(
        f"  (the whole runs differ from step {step}; after the last step the kernel's {tensor_name} element is "
        f"{float(dict(tensors_of(gpu_optimizer, gpu_params))[tensor_name].flatten()[index])}, the reference's "
        f"{float(dict(tensors_of(cpu_optimizer, cpu_params))[tensor_name].flatten()[index])}; "
        f"step counter {float(gpu_state['step'])})"
    )
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--distribution", choices=sorted(DISTRIBUTIONS), default="normal")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("needs a CUDA device")
    total = 0
    for name in sorted(SETTINGS):
        for update in reference.UPDATES:
            for arithmetic in reference.ARITHMETICS:
                total += explain(name, update, arithmetic, args.distribution, args.steps)
    print(f"total differing elements: {total}")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
