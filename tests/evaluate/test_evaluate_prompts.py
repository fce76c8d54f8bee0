"""Prompt sets: the shipped ones load and look like their subset; the user's JSONL loads,
and every bad record names its file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specguard.evaluate import _promptset as promptset
from specguard.evaluate._promptset import BUILTIN_SUBSETS, PromptError


@pytest.mark.parametrize("subset", BUILTIN_SUBSETS)
def test_shipped_sets_have_20_to_40_distinct_prompts(subset: str) -> None:
    prompts = promptset.load_builtin(subset)
    assert 20 <= len(prompts) <= 40
    assert all(p.subset == subset and p.is_chat for p in prompts)
    ids = [p.id for p in prompts]
    assert len(set(ids)) == len(ids)
    texts = [json.dumps(p.messages) for p in prompts]
    assert len(set(texts)) == len(texts)


def test_tool_call_set_has_tool_schemas_and_multi_turn_tool_results() -> None:
    prompts = promptset.load_builtin("tool_call")
    assert all(p.tools for p in prompts)
    for prompt in prompts:
        for tool in prompt.tools or ():
            params = tool["function"]["parameters"]
            assert tool["type"] == "function" and params["type"] == "object"
            assert set(params["required"]) <= set(params["properties"])
    multi = [p for p in prompts if any(m["role"] == "tool" for m in p.messages or ())]
    assert len(multi) >= 8
    for prompt in multi:
        calls = {c["id"] for m in prompt.messages or () for c in m.get("tool_calls") or ()}
        results = {m["tool_call_id"] for m in prompt.messages or () if m["role"] == "tool"}
        assert results <= calls  # every tool result answers a call made earlier


def test_rag_prompts_carry_numbered_passages_and_a_question() -> None:
    for prompt in promptset.load_builtin("rag"):
        user = prompt.messages[-1]["content"]  # type: ignore[index]
        assert "[1]" in user and "[3]" in user and "Question:" in user


def test_request_body_streams_with_usage_on_every_chunk() -> None:
    prompt = promptset.load_builtin("tool_call")[0]
    body = prompt.body("m", 128, None)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["tools"] and body["max_tokens"] == prompt.max_tokens
    assert prompt.body("m", 128, 16)["max_tokens"] == 16
    assert prompt.path == "/v1/chat/completions"


def test_user_jsonl_chat_and_completion_records(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    records = [
        {"messages": [{"role": "user", "content": "hi"}], "subset": "support"},
        {"prompt": "Once upon a time", "max_tokens": 40, "subset": "story"},
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
        },
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    grouped = promptset.load(path, None)
    assert list(grouped) == ["support", "story", "default"]
    story = grouped["story"][0]
    assert not story.is_chat and story.path == "/v1/completions"
    assert story.body("m", 128, None)["prompt"] == "Once upon a time"
    assert story.body("m", 128, None)["max_tokens"] == 40
    assert list(promptset.load(path, ["story"])) == ["story"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "mine.jsonl:2: not JSON"),
        ('{"subset": "a"}', "mine.jsonl:2: needs exactly one of 'messages'"),
        ('{"prompt": "a", "messages": []}', "mine.jsonl:2: needs exactly one of"),
        ('{"prompt": ""}', "mine.jsonl:2: prompt: expected a non-empty string"),
        ('{"messages": []}', "mine.jsonl:2: messages: expected a non-empty list"),
        ('{"messages": [{"role": "robot", "content": "a"}]}', "mine.jsonl:2: messages[0].role"),
        ('{"messages": [{"role": "user"}]}', "mine.jsonl:2: messages[0].content: missing"),
        (
            '{"prompt": "a", "max_tokens": 0}',
            "mine.jsonl:2: max_tokens: expected a whole number >= 1",
        ),
        ('{"prompt": "a", "subset": "Bad Name"}', "mine.jsonl:2: subset:"),
        ('{"prompt": "a", "tools": []}', "mine.jsonl:2: tools: only chat records"),
        (
            '{"messages": [{"role": "user", "content": "a"}], "tools": "x"}',
            "mine.jsonl:2: tools: expected a list",
        ),
        ("[1, 2]", "mine.jsonl:2: expected a JSON object"),
    ],
)
def test_bad_user_records_name_line_and_field(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text('{"prompt": "fine"}\n' + line + "\n")
    with pytest.raises(PromptError) as caught:
        promptset.load_file(path)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_missing_file_empty_file_and_unknown_subsets(tmp_path: Path) -> None:
    with pytest.raises(PromptError, match="--prompts: file not found"):
        promptset.load_file(tmp_path / "nope.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(PromptError, match="no prompts"):
        promptset.load_file(empty)
    with pytest.raises(PromptError, match="--subsets: unknown subset 'poetry'"):
        promptset.load(None, ["poetry"])
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"prompt": "a", "subset": "x"}\n')
    with pytest.raises(PromptError, match="--subsets: y not in the prompt file"):
        promptset.load(mine, ["y"])
