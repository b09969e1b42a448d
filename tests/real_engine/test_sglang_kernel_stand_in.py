"""The `sgl_kernel` stand-in (tests/real_engine/sgl_kernel_cpu) against the installed SGLang's source.

SGLang's CPU engine imports kernel names at module load; a release that adds one would fail at
start-up with an ImportError deep in a worker. These tests read the installed sglang instead and
name what the stand-in lacks, run its two real operations on tensors, and guard the one trap:
`torch.ops.sgl_kernel.convert_weight_packed` must not exist (SGLang would believe AMX kernels exist).
"""

from __future__ import annotations

import json
import subprocess
import textwrap

from tests.real_engine.conftest import RealSglang
from tests.real_engine.sgl_kernel_scan import cpu_imports, ops_referenced


def _in_engine(real_sglang: RealSglang, code: str) -> str:
    proc = subprocess.run([str(real_sglang.python), "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, env={**real_sglang.env(), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_stand_in_answers_every_import_sglangs_cpu_path_makes(real_sglang: RealSglang) -> None:
    wanted = cpu_imports(real_sglang.sglang_dir)
    # the scan finds what the reference names for 0.5.23 (a scan that finds nothing proves nothing)
    names = {i.name for i in wanted}
    assert {"assign_req_to_token_pool_cpu", "copy_all_layer_kv_cache_cpu", "verify_tree_greedy_cpu",
            "fill_bonus_tokens_cpu", "reconstruct_indices_from_tree_mask"} <= names, sorted(names)
    # the guards are read, not ignored: CUDA-only and AMX-only names are not asked of the stand-in
    assert "apply_token_bitmask_inplace_cuda" not in names and "rmsnorm" not in names
    probe = json.dumps([[i.module, i.name] for i in wanted])
    out = _in_engine(real_sglang, f"""
        import importlib, json
        missing = []
        for module, name in json.loads({probe!r}):
            try:
                m = importlib.import_module(module)
            except ImportError as exc:
                missing.append(f"{{module}}: {{exc}}")
                continue
            if name and not hasattr(m, name):
                missing.append(f"{{module}}.{{name}}")
        print(json.dumps(missing))
    """)
    missing = set(json.loads(out))
    lacking = [str(i) for i in wanted if f"{i.module}.{i.name}" in missing or any(
        m.startswith(i.module + ":") for m in missing)]
    assert not lacking, "the sgl_kernel stand-in lacks:\n" + "\n".join(lacking)


def test_convert_weight_packed_is_not_registered_and_sglang_sees_no_amx(real_sglang: RealSglang) -> None:
    # SGLang's own probe of AMX is this hasattr (srt/utils/common.py cpu_has_amx_support)
    assert "convert_weight_packed" in ops_referenced(real_sglang.sglang_dir)
    out = _in_engine(real_sglang, """
        import json, torch, sgl_kernel
        from sglang.srt.utils.common import cpu_has_amx_support, is_cpu
        print(json.dumps({"packed": hasattr(torch.ops.sgl_kernel, "convert_weight_packed"),
                          "amx": cpu_has_amx_support(), "is_cpu": is_cpu(),
                          "stand_in": sgl_kernel.__file__}))
    """)
    got = json.loads(out)
    assert got == {"packed": False, "amx": False, "is_cpu": True, "stand_in": got["stand_in"]}, got
    assert str(real_sglang.venv) in got["stand_in"]


def test_the_two_registered_ops_do_what_sglangs_triton_kernels_do(real_sglang: RealSglang) -> None:
    out = _in_engine(real_sglang, """
        import json, torch, sgl_kernel
        # request 0 -> row 2, columns [1, 3); request 1 -> row 0, columns [0, 2): out_cache_loc in order
        req_to_token = torch.zeros(3, 8, dtype=torch.int32)
        torch.ops.sgl_kernel.assign_req_to_token_pool_cpu(
            torch.tensor([2, 0]), req_to_token, torch.tensor([1, 0]), torch.tensor([3, 2]),
            torch.tensor([10, 11, 12, 13]), 8)
        # two layer buffers of 4 rows: rows 2, 3 copied onto rows 0, 1 in each
        a = torch.arange(12, dtype=torch.float32).reshape(4, 3)
        b = torch.arange(100, 108, dtype=torch.float16).reshape(4, 2)
        ptrs = torch.tensor([a.data_ptr(), b.data_ptr()], dtype=torch.uint64)
        strides = torch.tensor([a.stride(0) * a.element_size(), b.stride(0) * b.element_size()])
        torch.ops.sgl_kernel.copy_all_layer_kv_cache_cpu(ptrs, strides, torch.tensor([0, 1]), torch.tensor([2, 3]))
        print(json.dumps({"r2t": req_to_token.tolist(), "a": a.tolist(), "b": b.tolist()}))
    """)
    got = json.loads(out)
    assert got["r2t"] == [[12, 13, 0, 0, 0, 0, 0, 0], [0] * 8, [0, 10, 11, 0, 0, 0, 0, 0]]
    assert got["a"] == [[6, 7, 8], [9, 10, 11], [6, 7, 8], [9, 10, 11]]
    assert got["b"] == [[104, 105], [106, 107], [104, 105], [106, 107]]


def test_a_speculative_kernel_says_what_it_is_not(real_sglang: RealSglang) -> None:
    out = _in_engine(real_sglang, """
        import sgl_kernel
        try:
            sgl_kernel.verify_tree_greedy_cpu()
        except NotImplementedError as exc:
            print(exc)
    """)
    assert "sgl_kernel.verify_tree_greedy_cpu" in out and "speculative decoding" in out, out
