"""Named filter rules, applied to a family's configs before anything is compiled (seed 000 section 3.5.1).

Each removed config is attributed to the first rule that removes it, so the per-rule counts add up. The rules only
remove what cannot work or would surely spill; everything else goes to the compiler, whose failures the sweep
records as rows. A family's rules are the `RULES` of its `filters` plug-in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from ..device import SHARED_MEMORY_BYTES


@dataclass(frozen=True)
class DeviceLimits:
    arch: str
    shared_memory_bytes: int

    @classmethod
    def for_arch(cls, arch: str) -> DeviceLimits:
        if arch not in SHARED_MEMORY_BYTES:
            raise ValueError(f"arch={arch!r} has no shared-memory table entry; known: {sorted(SHARED_MEMORY_BYTES)}")
        return cls(arch, SHARED_MEMORY_BYTES[arch])

    @classmethod
    def from_device(cls, device=None) -> DeviceLimits:
        import torch

        from ..toolchain import device_arch

        properties = torch.cuda.get_device_properties(device)
        return cls(device_arch(device), properties.shared_memory_per_block_optin)


@dataclass(frozen=True)
class Rule:
    name: str
    why: str
    removes: Callable[[object, DeviceLimits], bool]


@dataclass(frozen=True)
class FilterResult:
    survivors: list
    removed: dict  # config -> the first rule that removed it
    counts: Counter  # rule name -> configs it removed


def apply_rules(configs: list, limits: DeviceLimits, rules: tuple[Rule, ...]) -> FilterResult:
    survivors, removed = [], {}
    for config in configs:
        rule = next((r for r in rules if r.removes(config, limits)), None)
        if rule is None:
            survivors.append(config)
        else:
            removed[config] = rule.name
    counts = Counter({rule.name: 0 for rule in rules})
    counts.update(removed.values())
    return FilterResult(survivors, removed, counts)
