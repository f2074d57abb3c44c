#!/usr/bin/env python3
"""Dumps llama.cpp's intermediate tensors for one golden prompt: how the CPU device was made to
compute llama.cpp's bits (NOTES.md, fifth session).

Evaluates the prompt of tests/fixtures/golden_smollm2.json named NAME in one batch, then its first
two greedy tokens one step each, through llama-cpp-python's low-level API with an eval callback
that copies every F32 tensor the graph computes. Writes OUT.npz with keys "<stage>:<tensor name>"
(stage: prompt, step1, step2; a repeated name gets "#" appended per repeat, e.g. "Qcur-0##" is
Qcur after RoPE) and arrays shaped [ne3, ne2, ne1, ne0].

    pip install llama-cpp-python==0.3.36 numpy && bash scripts/fetch-model.sh
    python3 scripts/dump-llama-cpp-tensors.py prose /tmp/prose.npz
"""
import ctypes
import json
import os
import sys

import llama_cpp as L
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
GOLDEN = os.path.join(ROOT, "tests", "fixtures", "golden_smollm2.json")
GGML_TYPE_F32 = 0


class GgmlTensor(ctypes.Structure):
    """struct ggml_tensor of the llama.cpp vendored by llama-cpp-python 0.3.36 (ggml.h)."""
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64),
                ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8)]


def main():
    name, out_path = sys.argv[1], sys.argv[2]
    prompt = next(p for p in json.load(open(GOLDEN))["prompts"] if p["name"] == name)
    store, stage = {}, ["prompt"]

    def on_tensor(t, ask, _user):
        if ask:
            return True
        tt = ctypes.cast(t, ctypes.POINTER(GgmlTensor)).contents
        if tt.type != GGML_TYPE_F32:
            return True
        ne, nb = list(tt.ne), list(tt.nb)
        arr = np.empty((ne[3], ne[2], ne[1], ne[0]), dtype=np.float32)
        for i3 in range(ne[3]):
            for i2 in range(ne[2]):
                for i1 in range(ne[1]):
                    base = tt.data + i3 * nb[3] + i2 * nb[2] + i1 * nb[1]
                    for i0 in range(ne[0]):
                        arr[i3, i2, i1, i0] = ctypes.c_float.from_address(base + i0 * nb[0]).value
        key = f"{stage[0]}:{tt.name.decode()}"
        while key in store:
            key += "#"
        store[key] = arr
        return True

    callback = L.ggml_backend_sched_eval_callback(on_tensor)
    L.llama_backend_init()
    model = L.llama_model_load_from_file(MODEL.encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_threads, cp.n_threads_batch = 512, 512, 2, 2
    cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED  # as make_golden.py's Llama() does
    cp.cb_eval, cp.cb_eval_user_data = callback, None
    ctx = L.llama_init_from_model(model, cp)

    def decode(tokens):
        arr = (L.llama_token * len(tokens))(*tokens)
        if L.llama_decode(ctx, L.llama_batch_get_one(arr, len(tokens))) != 0:
            sys.exit("llama_decode failed")

    decode(prompt["ids"])
    for i, tok in enumerate(prompt["greedy"][:2]):
        stage[0] = f"step{i + 1}"
        decode([tok])
    np.savez(out_path, **store)
    print(f"wrote {len(store)} tensors to {out_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
