"""Drives a running strata-rt server with the official `openai` Python client (PyPI).

Run by tests/http_openai_client.rs against a server it starts:

    python tests/python/test_openai_client.py http://127.0.0.1:PORT/v1

It checks what the client itself sees (types, fields, errors) and prints one JSON line with what
it got, which the Rust test compares against the server's raw HTTP answers. Exit status 0 means
every check here passed.
"""

import importlib.metadata
import json
import sys

import openai
from openai import OpenAI


def main() -> int:
    base_url = sys.argv[1]
    client = OpenAI(base_url=base_url, api_key="not-needed", timeout=120.0, max_retries=0)

    models = client.models.list()
    names = [m.id for m in models.data]
    assert len(names) == 1, names
    model = names[0]

    # A streaming chat completion, with the usage chunk.
    stream = client.chat.completions.create(
        model=model,
        messages=[
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "Name a primary color."},
        ],
        temperature=0,
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts, roles, finish, usage, ids, n_chunks = [], [], None, None, set(), 0
    for chunk in stream:
        n_chunks += 1
        assert chunk.object == "chat.completion.chunk", chunk
        ids.add(chunk.id)
        if chunk.usage is not None:
            usage = chunk.usage
            assert chunk.choices == [], chunk
        for choice in chunk.choices:
            assert choice.index == 0, choice
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                parts.append(choice.delta.content)
            if choice.finish_reason is not None:
                finish = choice.finish_reason
    assert len(ids) == 1 and next(iter(ids)).startswith("chatcmpl-"), ids
    assert roles == ["assistant"], roles
    assert finish in ("stop", "length"), finish
    assert usage is not None and usage.completion_tokens >= 1, usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, usage
    chat_text = "".join(parts)
    assert chat_text, "the streamed chat produced text"

    # A non-streaming text completion.
    cmpl = client.completions.create(model=model, prompt="The capital of France is", temperature=0, max_tokens=12)
    assert cmpl.object == "text_completion", cmpl
    assert cmpl.id.startswith("cmpl-"), cmpl.id
    assert len(cmpl.choices) == 1 and cmpl.choices[0].finish_reason in ("stop", "length"), cmpl
    assert cmpl.usage.completion_tokens >= 1, cmpl.usage

    # A non-streaming chat completion parses into the client's types as well.
    chat = client.chat.completions.create(
        model=model,
        messages=[
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "Name a primary color."},
        ],
        temperature=0,
        max_tokens=16,
    )
    assert chat.choices[0].message.role == "assistant", chat
    assert chat.choices[0].message.content == chat_text, (chat.choices[0].message.content, chat_text)

    # Errors surface as the client's typed exceptions with the server's OpenAI error body.
    try:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        raise AssertionError("an unknown model was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400, e
        assert e.code == "model_not_found", (e.code, e.body)
        unknown_model_error = e.body
    try:
        client.completions.create(model=model, prompt="hi", n=2, max_tokens=2)
        raise AssertionError("n=2 was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.param == "n", (e.param, e.body)

    print(json.dumps({
        "openai_version": importlib.metadata.version("openai"),
        "model": model,
        "chat_text": chat_text,
        "chat_finish": finish,
        "chat_usage": usage.model_dump(),
        "chat_chunks": n_chunks,
        "completion_text": cmpl.choices[0].text,
        "completion_usage": cmpl.usage.model_dump(),
        "unknown_model_error": unknown_model_error,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
