"""vllm-kit: ask Linux for AMX's tile data before vLLM's CPU kernels use it.

On an x86-64 CPU with AMX (Intel Sapphire Rapids and later), Linux 5.16 and newer give a process AMX's tile state
only after it asks (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); the first AMX instruction before that
is an illegal instruction. vLLM's CPU attention takes its AMX kernels for bfloat16 wherever
torch.cpu._is_amx_tile_supported() (vllm/v1/attention/backends/cpu_attn.py), and vLLM 0.32's CPU build never asks
(nothing in it calls torch.cpu._init_amx): on such a host its worker died with SIGILL at the first request while
/health answered (exit 132; float32 ran, and bfloat16 ran after the request). The image's Python imports this file
at every start through a .pth file, so every vLLM process asks once, spawned or forked. Elsewhere (no AMX, an older
kernel, another architecture) the call fails or is skipped, and nothing changes.
"""

import ctypes
import os
import sys

SYS_ARCH_PRCTL = 158  # x86-64
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18


def request() -> bool:
    """True when the kernel granted this process AMX's tile data."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


GRANTED = request()
