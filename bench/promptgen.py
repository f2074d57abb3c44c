"""Deterministic synthetic source-code prompts (stdlib only).

A prompt is a Python-like source file of N functions followed by one question about it. The same
(seed, index, n_functions, tag) always gives the same bytes: the generator uses only its own
`random.Random` seeded from a string, never global state, the clock or hash randomization.

Every prompt starts with a unique header line (`# file <tag>-<seed>-<index>: ...`) so that no two
prompts of a run share their first tokens: a prefix cache cannot serve a "fresh" prompt. For chat
requests the header goes into the system message, which the chat template puts first.
"""
import random

_VERBS = ["parse", "load", "merge", "split", "encode", "decode", "render", "score", "filter", "group",
          "resolve", "update", "compute", "collect", "normalize", "validate", "build", "scan", "flush", "apply"]
_NOUNS = ["record", "header", "buffer", "token", "matrix", "span", "config", "entry", "block", "packet",
          "segment", "index", "frame", "batch", "cursor", "vector", "table", "column", "window", "queue"]
_ARGS = ["items", "offset", "limit", "scale", "key", "values", "width", "depth", "mask", "count", "name", "step"]
_OPS = ["+", "-", "*", "//", "%"]


def _function(rnd: random.Random, i: int) -> str:
    """One small function (about 40 tokens on a GPT-2-style BPE vocabulary)."""
    name = f"{rnd.choice(_VERBS)}_{rnd.choice(_NOUNS)}_{i}"
    a, b = rnd.sample(_ARGS, 2)
    k1, k2 = rnd.randrange(2, 97), rnd.randrange(2, 97)
    op1, op2 = rnd.choice(_OPS), rnd.choice(_OPS)
    body = rnd.randrange(3)
    if body == 0:
        lines = [f"    total = {a} {op1} {k1}", f"    if total > {b}:", f"        return total {op2} {k2}", f"    return {b}"]
    elif body == 1:
        lines = [f"    out = []", f"    for x in range({k1}):", f"        out.append(x {op1} {a} {op2} {b})", f"    return out"]
    else:
        lines = [f"    acc = {k1}", f"    while acc < {b}:", f"        acc = acc {op1} {a} + {k2}", f"    return acc"]
    return f"def {name}({a}, {b}):\n" + "\n".join(lines) + "\n"


def header(seed: int, index: int, tag: str = "") -> str:
    """The unique first line of prompt `index`."""
    rnd = random.Random(f"header:{tag}:{seed}:{index}")
    return f"# file {tag or 'run'}-{seed}-{index} (id {rnd.randrange(16**8):08x}): module under review\n"


def source(n_functions: int, seed: int, index: int, tag: str = "") -> str:
    """The source file: the header line and `n_functions` functions."""
    rnd = random.Random(f"source:{tag}:{seed}:{index}:{n_functions}")
    return header(seed, index, tag) + "\n".join(_function(rnd, i) for i in range(n_functions))


QUESTION = "Summarize what this module does in a few sentences, then name the function you would test first and why."
FOLLOW_UP = "Now write a unit test for that function."


def chat_messages(n_functions: int, seed: int, index: int, tag: str = "") -> list:
    """The first turn of conversation `index`: the unique header as the system message (the chat
    template puts it first), then the source and the question as the user message."""
    src = source(n_functions, seed, index, tag)
    head, _, body = src.partition("\n")
    return [
        {"role": "system", "content": head.lstrip("# ") + ". You are a careful code reviewer."},
        {"role": "user", "content": body + "\n" + QUESTION},
    ]


def follow_up(messages: list, answer: str) -> list:
    """The same conversation one turn later: the assistant's answer and a new user turn appended,
    so its prompt's prefix is the previous prompt (reusable by a prefix cache)."""
    return list(messages) + [{"role": "assistant", "content": answer}, {"role": "user", "content": FOLLOW_UP}]
