"""Checks of argument values the API's modules share: an integer size (numpy's too, never a bool), a real number,
a model, and the module names a conversion's `skip` gives."""

from __future__ import annotations

import numbers
from collections.abc import Iterable

import torch


def is_integer(value) -> bool:
    """An integer as torch takes sizes (Python's or numpy's: anything with __index__), not a bool or a float."""
    return hasattr(type(value), "__index__") and not isinstance(value, bool)


def is_real(value) -> bool:
    """A real number (Python's or numpy's); not a bool, which is an int to isinstance but a flag to the caller."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def checked_model(model) -> torch.nn.Module:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    return model


def checked_names(model: torch.nn.Module, skip, what: str) -> set[str]:
    """`skip` (a name or names of `what`s: modules, layers) as a set of qualified names `model` has."""
    names = {skip} if isinstance(skip, str) else set(skip) if isinstance(skip, Iterable) else None
    if names is None or not all(isinstance(name, str) for name in names):
        raise TypeError(f"skip must be a {what}'s name or an iterable of names; got {skip!r}")
    unknown = names - {name for name, _ in model.named_modules(remove_duplicate=False)}
    if unknown:
        raise ValueError(f"skip names modules that model does not have: {sorted(unknown)}")
    return names


def is_skipped(name: str, skip: set[str]) -> bool:
    """Whether the module named `name` or a module above it (its qualified-name prefixes, the root's "" too) is in
    `skip`."""
    parts = name.split(".") if name else []
    return any(".".join(parts[:length]) in skip for length in range(len(parts) + 1))
