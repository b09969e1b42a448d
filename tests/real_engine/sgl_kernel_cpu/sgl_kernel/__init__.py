"""A plain-PyTorch stand-in for SGLang's `sgl_kernel`, for SGLang's CPU engine on a CPU without AMX.

Test support of the Cockpit repository (see ../README.md); never part of the installed product.
Written from the imports sglang 0.5.23 makes on its CPU path (tests/real_engine/sgl_kernel_scan.py
finds them). Two names are real operations with the semantics of SGLang's own Triton kernels of
the same name, registered as `torch.ops.sgl_kernel.*` custom ops as the real package registers
them; the rest serve speculative decoding only and raise NotImplementedError naming themselves.

Deliberately absent: `torch.ops.sgl_kernel.convert_weight_packed`. SGLang decides that AMX kernels
exist by `hasattr(torch.ops.sgl_kernel, "convert_weight_packed")`; registering it would send every
layer to kernels this package does not have.
"""

from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F

from sgl_kernel._missing import speculative_only


@torch.library.custom_op("sgl_kernel::assign_req_to_token_pool_cpu", mutates_args=("req_to_token",))
def _assign_req_to_token_pool_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                  start_offset: torch.Tensor, end_offset: torch.Tensor,
                                  out_cache_loc: torch.Tensor, pool_len: int) -> None:
    # Request i's row of req_to_token gets the next (end - start) entries of out_cache_loc at
    # columns [start, end): sglang/srt/mem_cache/allocation.py's Triton kernel of the same name.
    taken = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True):
        n = end - start
        if n <= 0:
            continue
        if end > pool_len:
            raise ValueError(f"request row {row}: end offset {end} is past the pool's {pool_len} columns")
        req_to_token[row, start:end] = out_cache_loc[taken:taken + n].to(req_to_token.dtype)
        taken += n


@torch.library.custom_op("sgl_kernel::copy_all_layer_kv_cache_cpu", mutates_args="unknown")
def _copy_all_layer_kv_cache_cpu(data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor,
                                 src_loc: torch.Tensor) -> None:
    # For every layer buffer (a raw address and a row stride in bytes), row src_loc[j] is copied
    # to row tgt_loc[j]: sglang/kernels/ops/kvcache/cache_move.py's copy_all_layer_kv_cache_tiled.
    # All rows are read before any is written, as the Triton kernel loads before it stores.
    pairs = list(zip(tgt_loc.tolist(), src_loc.tolist(), strict=True))
    for base, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        rows = [ctypes.string_at(base + src * stride, stride) for _, src in pairs]
        for (tgt, _), row in zip(pairs, rows, strict=True):
            ctypes.memmove(base + tgt * stride, row, stride)


def assign_req_to_token_pool_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor,
                                 out_cache_loc: torch.Tensor, pool_len: int) -> None:
    torch.ops.sgl_kernel.assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset,
                                                      end_offset, out_cache_loc, pool_len)


def copy_all_layer_kv_cache_cpu(data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor,
                                src_loc: torch.Tensor) -> None:
    torch.ops.sgl_kernel.copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc)


def silu_and_mul(input: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """silu(x[..., :d]) * x[..., d:], the gated activation (imported by MoE runners off CUDA)."""
    d = input.shape[-1] // 2
    result = F.silu(input[..., :d]) * input[..., d:]
    if out is not None:
        out.copy_(result)
        return out
    return result


def gelu_and_mul(input: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """gelu(x[..., :d]) * x[..., d:] (exact gelu)."""
    d = input.shape[-1] // 2
    result = F.gelu(input[..., :d]) * input[..., d:]
    if out is not None:
        out.copy_(result)
        return out
    return result


# speculative decoding (EAGLE, NGRAM, multi-layer EAGLE) on the CPU engine
assign_draft_cache_locs_contiguous_cpu = speculative_only("assign_draft_cache_locs_contiguous_cpu")
assign_extend_cache_locs_cpu = speculative_only("assign_extend_cache_locs_cpu")
fill_accept_out_cache_loc_cpu = speculative_only("fill_accept_out_cache_loc_cpu")
fill_bonus_tokens_cpu = speculative_only("fill_bonus_tokens_cpu")
rotate_input_ids_cpu = speculative_only("rotate_input_ids_cpu")
build_tree_kernel_efficient_cpu = speculative_only("build_tree_kernel_efficient_cpu")
verify_tree_greedy_cpu = speculative_only("verify_tree_greedy_cpu")
