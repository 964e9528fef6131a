"""What the scripts of python/ share about their device: one line and exit status 2 where a script needs a GPU and
none is visible (as argparse does for a bad argument), and the argparse types that refuse bad names before that.

Call `require_cuda` after `parse_args`, so that `--help` and argument errors still answer without a GPU (and name a
bad value rather than the missing GPU). torch is imported inside the functions: first_call_times.py runs this file
as a probe and keeps its own process torch-free.

    python python/script_device.py NAME   # exits 0 where CUDA is available, else 2 with "NAME needs a CUDA device"
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

DEVICE_TYPES = ("cpu", "cuda")


def cuda_missing(script: str) -> str | None:
    """The one-line reason `script` cannot run here, or None where a CUDA device is visible."""
    import torch

    return None if torch.cuda.is_available() else f"{script} needs a CUDA device"


def refuse(message: str) -> NoReturn:
    """Exits with status 2 and `message` as one line on stderr: argparse's status, without its usage block."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def require_cuda(script: str) -> None:
    """Exits with status 2 and one line on stderr where no CUDA device is visible (no traceback)."""
    reason = cuda_missing(script)
    if reason:
        refuse(reason)


def require_device(device, script: str) -> None:
    """`require_cuda` where `device` (a name or torch.device) is a CUDA device; nothing for the CPU."""
    if str(device).split(":")[0] == "cuda":
        require_cuda(script)


def checked(check, convert=str):
    """An argparse type: `convert(text)` if `check` takes it, else its ValueError's message as argparse's error line
    (argparse would print only "invalid <function> value"). Names stay names: the scripts parse them later."""

    def parse(text: str):
        try:
            value = convert(text)
            check(value)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return value

    parse.__name__ = getattr(check, "__name__", "value")
    return parse


def device_name(text: str) -> str:
    """argparse type for `--device`: cpu, cuda or cuda:N, refused by name otherwise (before any GPU setup)."""
    kind, _, index = text.partition(":")
    if kind not in DEVICE_TYPES or (index and (kind != "cuda" or not index.isdigit())):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device: cpu, cuda or cuda:N")
    return text


def default_device() -> str:
    """The `--device` default of scripts that also run on the CPU: cuda where visible."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python python/script_device.py SCRIPT_NAME")
    require_cuda(sys.argv[1])
