"""One nvcc compilation cut into the steps ninja can run side by side.

nvcc runs its two C++ front ends one after the other: cudafe++ (the host side) and cicc (the device side) each parse
and instantiate the whole translation unit, and for a CUTLASS 3.x kernel each takes about 40% of the build. They
depend on nothing but the preprocessed source, so here they run at once: `nvcc --dryrun` lists the commands nvcc
would run, and they are cut into three scripts, host (preprocess, cudafe++), device (preprocess, cicc, ptxas,
fatbinary) and link (the host compile, nvlink, the final link), the last depending on the other two. (The host
compile must wait for the device side: it includes the launch stubs cicc writes, and the fatbinary.) A first call
that builds one kernel then waits for the longer front end, not the sum of both.

Anything in the listing this does not recognise gives None, and the caller runs nvcc whole.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Steps:
    """Shell scripts (their text) of one compilation: `link` runs after `host` and `device` have both finished."""

    host: str
    device: str
    link: str


def _tool(command: str) -> str:
    first = command.split(None, 1)[0].strip('"')
    return first.rsplit("/", 1)[-1]


def _output(command: str) -> str | None:
    words = shlex.split(command)
    return words[words.index("-o") + 1] if "-o" in words[:-1] else None


def _source(command: str) -> str | None:
    """The preprocessed file a front end reads (its last `.ii` argument)."""
    return next((word for word in reversed(shlex.split(command)) if word.endswith(".ii")), None)


def split(nvcc: str, arguments: list[str], output: Path, work: Path, cwd: Path) -> Steps | None:
    """The steps of `nvcc arguments -o output`, intermediates kept in `work` (the link step removes them; the
    caller removes `work` if a step fails or None comes back); None if the listing is not the expected one (one
    cudafe++, one cicc, each fed by its own preprocessing)."""
    work.mkdir(parents=True, exist_ok=True)
    listing = subprocess.run(
        [nvcc, *arguments, "--dryrun", "--keep", "--keep-dir", str(work), "-o", str(output)],
        capture_output=True,
        text=True,
        cwd=cwd,
    )
    if listing.returncode != 0:
        return None
    try:
        return _cut(listing.stderr, nvcc, arguments, output, work, cwd)
    except ValueError:  # a listing shlex cannot read
        return None


def _cut(listing: str, nvcc: str, arguments: list[str], output: Path, work: Path, cwd: Path) -> Steps | None:
    lines = [line[3:] for line in listing.splitlines() if line.startswith("#$ ")]
    commands = [line for line in lines if not _ASSIGNMENT.match(line)]
    # nvcc's own variables, written back quoted. Some (SYSTEM_INCLUDES="-isystem" "dir") are not one value; none of
    # those may be used below, and the search path the tools are found by must be one.
    environment, unusable = [], []
    for line in filter(_ASSIGNMENT.match, lines):
        name, value = line.split("=", 1)
        words = shlex.split(value)
        if len(words) <= 1:
            environment.append(f"{name}={shlex.quote(words[0] if words else '')}")
        else:
            unusable.append(name)
    if any(name in ("PATH", "LD_LIBRARY_PATH") or f"${name}" in c for name in unusable for c in commands):
        return None
    tools = [_tool(c) for c in commands]
    if tools.count("cudafe++") != 1 or tools.count("cicc") != 1:
        return None
    cudafe, cicc = tools.index("cudafe++"), tools.index("cicc")
    host_input, device_input = (_source(commands[i]) for i in (cudafe, cicc))
    preprocess = {_output(c): i for i, c in enumerate(commands) if _tool(c) in ("gcc", "g++", "cc") and " -E " in c}
    if host_input not in preprocess or device_input not in preprocess:
        return None
    host = [preprocess[host_input], cudafe]
    # The device side ends with the fatbinary the host compile embeds: everything from cicc up to it.
    fatbinary = next((i for i in range(cicc, len(commands)) if tools[i] == "fatbinary"), None)
    if fatbinary is None:
        return None
    device = [preprocess[device_input], *range(cicc, fatbinary + 1)]
    if any(i in host for i in device) or max(host + device) > fatbinary:
        return None
    link = [i for i in range(len(commands)) if i not in host and i not in device]
    # cicc reads the module id (the prefix of internal names, which host and device must agree on) that cudafe++
    # writes when it ends; both compute the same one from the source, so cicc writes its own, and the link checks
    # that they agree (else it compiles the whole way, as nvcc does).
    module_id = re.search(r'--module_id_file_name ("[^"]+"|\S+)', commands[cicc])
    if module_id is None or "--gen_module_id_file" not in commands[cudafe]:
        return None
    host_id = shlex.split(module_id[1])[0]
    device_id = host_id + ".device"
    commands[cicc] = commands[cicc].replace(
        module_id[0], f"--gen_module_id_file --module_id_file_name {shlex.quote(device_id)}"
    )
    # nvcc ignores a failed `rm` of a file that is not there yet; the scripts stop at any failed command.
    commands = [re.sub(r"^rm ", "rm -f ", c) for c in commands]

    def script(lines: list[str]) -> str:
        return "\n".join(["set -ae", f"cd {shlex.quote(str(cwd))}", *environment, *lines])

    whole = shlex.join([nvcc, *arguments, "-o", str(output)])
    agree = f"cmp -s {shlex.quote(host_id)} {shlex.quote(device_id)}"
    differ = "echo 'cutlass_ext: host and device module ids differ; compiling the whole way' >&2"
    link_lines = [f"if {agree}; then", *(commands[i] for i in link), "else", differ, whole, "fi"]
    return Steps(script([commands[i] for i in host]), script([commands[i] for i in device]), script(link_lines))
