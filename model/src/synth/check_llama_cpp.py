#!/usr/bin/env python3
"""Checks that llama.cpp accepts a synthetic GGUF written by strata_model::synth.

Loads the file with llama-cpp-python, checks the vocabulary and special tokens, tokenizes a
string (and that it detokenizes back), evaluates a few tokens and checks every logit is finite.

    /work/tools/venv/bin/python model/src/synth/check_llama_cpp.py FILE.gguf [FILE.gguf ...]

Exit status 0 when every file passes.
"""

import math
import sys

import llama_cpp
from llama_cpp import Llama

TEXT = "Hello, world! The capital of France is Paris.\nfn main() { println!(\"hi\"); }"


def check(path: str) -> None:
    llm = Llama(model_path=path, n_ctx=256, n_batch=64, n_threads=2, logits_all=True, verbose=False)
    meta = llm.metadata
    n_vocab = llm.n_vocab()
    print(f"{path}: arch={meta.get('general.architecture')} name={meta.get('general.name')!r} "
          f"n_vocab={n_vocab} pre={meta.get('tokenizer.ggml.pre')}")
    assert n_vocab == int(meta[f"{meta['general.architecture']}.vocab_size"]), "vocab size"

    tokens = llm.tokenize(TEXT.encode(), add_bos=False, special=False)
    back = llm.detokenize(tokens).decode("utf-8")
    assert back == TEXT, f"round trip: {back!r}"
    assert len(tokens) < len(TEXT.encode()), "no merges were applied"
    print(f"  tokenize: {len(TEXT.encode())} bytes -> {len(tokens)} tokens {tokens[:12]}...")

    im_end = llm.tokenize(b"<|im_end|>", add_bos=False, special=True)
    assert im_end == [llm.token_eos()], f"<|im_end|> is {im_end}, eos {llm.token_eos()}"
    chat = llm.tokenize(b"<|im_start|>user\nHi<|im_end|>\n", add_bos=False, special=True)
    assert chat[0] == n_vocab - 2, f"<|im_start|> is {chat[0]}"

    llm.reset()
    llm.eval(tokens[:8])
    n_eval = min(8, len(tokens))
    for i in range(n_eval):
        row = llm.scores[i]
        bad = [x for x in row[:n_vocab] if not math.isfinite(float(x))]
        assert not bad, f"{len(bad)} non-finite logits at position {i}"
    last = llm.scores[n_eval - 1][:n_vocab]
    mean = sum(float(x) for x in last) / n_vocab
    std = math.sqrt(sum((float(x) - mean) ** 2 for x in last) / n_vocab)
    top = max(range(n_vocab), key=lambda j: last[j])
    print(f"  eval {n_eval} tokens: logits finite, last position mean {mean:.3f} std {std:.3f}, "
          f"argmax {top} ({llm.detokenize([top])!r})")
    assert std > 1e-3, "logits are constant"


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    print(f"llama-cpp-python {llama_cpp.__version__}")
    failed = 0
    for path in sys.argv[1:]:
        try:
            check(path)
            print("  OK")
        except Exception as e:  # report every file
            failed += 1
            print(f"  FAILED: {type(e).__name__}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
