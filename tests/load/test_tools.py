"""Agentic tool-call rounds: streamed tool_calls assembled by the chunk reader, a history that
follows the agent loop and stays well-formed, the simulated engine answering a share of rounds
with tool calls (read by the real openai SDK), and recorded agent transcripts replayed."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from repro.core.openai_chunks import ChunkReader
from repro.core.sse import SSEDecoder
from repro.load.history import History
from repro.load.prompts import PromptFileError, PromptSource, load_prompt_file, message_chars
from repro.load.tools import ToolCountError, tool_definitions
from repro.sim import SimConfig, start_sim_process

# --- streams of tool-call chunks, as the engines send them ---------------------------------------


def chunk(delta: dict, finish=None) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def call_deltas(index: int, call: dict, pieces: list[str], shape: str) -> list[dict]:
    """One call's deltas: its header, then its argument fragments, in an engine's shape."""
    name = call["function"]["name"]
    if shape == "vllm":  # vllm/tool_parsers/hermes_tool_parser.py: name only, then {index, arguments}
        first = {"id": call["id"], "type": "function", "index": index, "function": {"name": name}}
        rest = [{"index": index, "function": {"arguments": p}} for p in pieces]
    else:  # SGLang's serving_chat.py: every delta carries type, later ones id and name null
        first = {"id": call["id"], "index": index, "type": "function", "function": {"name": name, "arguments": ""}}
        rest = [{"id": None, "index": index, "type": "function", "function": {"name": None, "arguments": p}}
                for p in pieces]
    return [first, *rest]


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:], strict=False) if b > a]


def read_stream(body: bytes, reads: list[int]) -> tuple[ChunkReader, int]:
    """Feed the bytes through the SSE decoder and the reader in reads split at `reads`."""
    decoder, reader, chars = SSEDecoder(), ChunkReader(), 0
    points = sorted({r % (len(body) + 1) for r in reads} | {0, len(body)})
    for a, b in zip(points, points[1:], strict=False):
        events = decoder.feed(body[a:b])
        if events:
            got, _, failure = reader.feed(events)
            assert failure is None
            chars += got
    return reader, chars


def sse(chunks: list[dict]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


arguments = st.dictionaries(st.sampled_from(["path", "command", "query", "n", "ok"]),
                            st.one_of(st.text(max_size=12), st.integers(), st.booleans()), max_size=3)


@settings(max_examples=150, deadline=None)
@given(calls=st.lists(st.tuples(st.sampled_from(["read_file", "run_shell", "search_code"]), arguments),
                      min_size=1, max_size=3),
       shape=st.sampled_from(["sglang", "vllm"]), content=st.text(max_size=8),
       cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
       reads=st.lists(st.integers(min_value=0, max_value=100_000), max_size=30))
def test_tool_calls_are_assembled_from_fragments_split_anywhere(calls, shape, content, cuts, reads):
    expected = [{"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                for i, (name, args) in enumerate(calls)]
    chunks = [chunk({"role": "assistant", "content": content})] if content else []
    for i, call in enumerate(expected):
        chunks += [chunk({"content": None, "tool_calls": [d]})
                   for d in call_deltas(i, call, split(call["function"]["arguments"], cuts), shape)]
    chunks.append(chunk({}, finish="tool_calls"))
    reader, chars = read_stream(sse(chunks), reads)
    assert reader.tool_calls == expected
    assert reader.finish_reason == "tool_calls" and reader.done
    assert "".join(reader.reply) == content
    # Names and argument fragments are progress, as content is.
    assert chars == len(content) + sum(len(c["function"]["name"]) + len(c["function"]["arguments"]) for c in expected)
    # The openai SDK's own accumulator assembles the same calls from the same chunks.
    state = ChatCompletionStreamState()
    for c in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(c))
    sdk = state.get_final_completion().choices[0].message.tool_calls or []
    assert [{"id": t.id, "type": t.type, "function": {"name": t.function.name, "arguments": t.function.arguments}}
            for t in sdk] == expected
    # A client that reads the SDK's parsed chunks hands their tool-call deltas to the reader as they are.
    from_sdk, sdk_chars = ChunkReader(), 0
    for c in chunks:
        for choice in ChatCompletionChunk.model_validate(c).choices:
            sdk_chars += from_sdk.add_tool_deltas(choice.delta.tool_calls or [])
    assert from_sdk.tool_calls == expected and sdk_chars == chars - len(content)


def test_a_round_of_only_tool_calls_is_progressing_from_its_first_delta():
    reader = ChunkReader()
    first = {"index": 0, "id": "c1", "type": "function", "function": {"name": "read_file", "arguments": ""}}
    chars, done, failure = reader.feed(SSEDecoder().feed(b"data: " + json.dumps(chunk({"tool_calls": [first]})).encode()
                                                         + b"\n\n"))
    assert (chars, done, failure) == (len("read_file"), False, None)
    fragment = {"index": 0, "function": {"arguments": '{"path"'}}
    chars, _, _ = reader.feed(SSEDecoder().feed(b"data: " + json.dumps(chunk({"tool_calls": [fragment]})).encode()
                                                + b"\n\n"))
    assert chars == len('{"path"') and reader.reply == []
    assert reader.tool_calls == [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path"'}}]


def test_plain_content_with_an_empty_tool_calls_list_makes_no_call():
    # vLLM's hermes parser sends `"tool_calls": []` beside content it lets through.
    reader, chars = read_stream(sse([chunk({"content": "hi", "tool_calls": []}), chunk({}, finish="stop")]), [])
    assert reader.tool_calls == [] and chars == 2 and reader.finish_reason == "stop"


def test_deltas_without_an_index_follow_their_id():
    deltas = [{"id": "a", "function": {"name": "f", "arguments": "{\"x\""}}, {"function": {"arguments": ": 1}"}},
              {"id": "b", "function": {"name": "g", "arguments": "{}"}}, {"id": "b", "function": {"arguments": ""}}]
    reader, _ = read_stream(sse([chunk({"tool_calls": [d]}) for d in deltas]), [])
    assert reader.tool_calls == [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
        {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]


# --- the agent loop's history --------------------------------------------------------------------

def assert_well_formed(messages: list[dict]) -> None:
    """The OpenAI rules: each tool call answered by its tool message before anything else; every
    tool message answers a call; and, as an agent loop does, no user turn right after tool results."""
    pending: set[str] = set()
    for before, message in zip([None, *messages], messages, strict=False):
        if message["role"] == "tool":
            assert message["tool_call_id"] in pending, message
            pending.discard(message["tool_call_id"])
            continue
        assert not pending, f"unanswered {pending} before {message}"
        assert not (message["role"] == "user" and before and before["role"] == "tool"), "user turn after tool results"
        pending = {c["id"] for c in message.get("tool_calls") or ()}
    assert not pending


def call(name="read_file", args='{"path": "a.py"}', call_id="call_1") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def test_the_history_follows_the_agent_loop():
    prompts = PromptSource(prompt_chars=40, tools=tool_definitions(4), tool_result_chars=120)
    h = History()
    h.start_round(prompts, 3, 1)
    assert [m["role"] for m in h.messages] == ["user"] and h.tools == prompts.tools
    h.finish_round("", [call(), call("run_shell", '{"command": "ls"}', "call_2")])
    assert [m["role"] for m in h.messages] == ["user", "assistant", "tool", "tool"]
    assert h.messages[1]["content"] is None and [m["tool_call_id"] for m in h.messages[2:]] == ["call_1", "call_2"]
    assert all(60 <= len(m["content"]) <= 120 for m in h.messages[2:])  # bounded results
    h.start_round(prompts, 3, 2)  # continues from the tool results: no user turn
    assert len(h.messages) == 4 and h.continues_from_tools
    h.finish_round("The file defines handle().")
    h.start_round(prompts, 3, 3)  # a new user turn: the second one (round 2 used none)
    assert h.messages[-1] == {"role": "user", "content": prompts.user_turn(3, 2)}
    assert_well_formed(h.messages)
    assert h.chars == sum(message_chars(m) for m in h.messages)
    # The same call gets the same result: a run is repeatable.
    again = History()
    again.start_round(prompts, 3, 1)
    again.finish_round("", [call()])
    assert again.messages[2]["content"] == h.messages[2]["content"]


def test_a_failed_round_withdraws_what_it_added_and_a_failed_continuation_is_retried():
    prompts = PromptSource(prompt_chars=40)
    h = History()
    h.start_round(prompts, 0, 1)
    h.finish_round("", [call()])
    before = (list(h.messages), h.chars)
    h.start_round(prompts, 0, 2)  # a tool-continuation round that fails
    h.withdraw_question()
    assert (h.messages, h.chars) == before and h.continues_from_tools
    h.start_round(prompts, 0, 3)  # the retry sends the same results again
    assert h.messages == before[0]
    h.finish_round("done")
    h.start_round(prompts, 0, 4)  # a user round that fails: its turn is dropped
    h.withdraw_question()
    assert h.messages[-1] == {"role": "assistant", "content": "done"}
    assert_well_formed(h.messages) and h.chars == sum(message_chars(m) for m in h.messages)


def test_calls_cut_short_or_without_ids_still_make_a_well_formed_history():
    h = History()
    h.start_round(PromptSource(), 0, 1)
    h.finish_round("partial", [call(args='{"path": "a.'), {"function": {"name": "run_shell", "arguments": "{}"}},
                               {"function": {"name": "git_diff", "arguments": "{}"}}])
    assistant = h.messages[1]
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"  # engines reject non-JSON arguments
    assert h.messages[2]["content"].startswith("error: the arguments of read_file are not a JSON object")
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert len(set(ids)) == 3 and all(ids)
    assert_well_formed(h.messages)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ok", "fail"]), st.integers(min_value=0, max_value=3)),
                min_size=1, max_size=12))
def test_any_sequence_of_rounds_keeps_the_history_well_formed(rounds):
    prompts = PromptSource(prompt_chars=30, tools=tool_definitions(3))
    h = History()
    for r, (outcome, n_calls) in enumerate(rounds, start=1):
        continuing = h.continues_from_tools
        size = len(h.messages)
        h.start_round(prompts, 1, r)
        assert len(h.messages) == size + (0 if continuing else 1)
        if outcome == "ok":
            h.finish_round(f"reply {r}", [call(call_id=f"c{r}_{i}") for i in range(n_calls)])
        else:
            h.withdraw_question()
            assert len(h.messages) == size
        assert_well_formed(h.messages)
        assert h.chars == sum(message_chars(m) for m in h.messages)


def test_tool_definitions_are_deterministic_and_bounded():
    tools = tool_definitions(30)
    names = [t["function"]["name"] for t in tools]
    assert tools == tool_definitions(30) and len(set(names)) == 30
    assert names[:3] == ["read_file", "run_shell", "search_code"]
    assert all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object" for t in tools)
    assert tool_definitions(0) == []
    with pytest.raises(ToolCountError, match="--tools 129: give 0 to 128"):
        tool_definitions(129)


# --- the simulated engine answers with tool calls ------------------------------------------------

@pytest.fixture(scope="module", params=["sglang", "vllm"])
def sim(request):
    with start_sim_process(SimConfig(dialect=request.param, ttft=0.001, itl=0.001)) as engine:
        yield engine


def messages_for(i: int) -> list[dict]:
    return [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": f"task {i}"}]


async def sdk_round(client: openai.AsyncOpenAI, messages, tools, **extra):
    """One streamed round read by the openai SDK; its own accumulator assembles the reply."""
    stream = await client.chat.completions.create(model="sim-model", messages=messages, tools=tools, stream=True,
                                                  max_tokens=32, stream_options={"include_usage": True}, **extra)
    state, tool_chunks = ChatCompletionStreamState(), 0
    async for c in stream:
        state.handle_chunk(c)
        tool_chunks += any(choice.delta.tool_calls for choice in c.choices)
    # The snapshot, not get_final_completion(): that refuses a reply cut at max_tokens ("length").
    return state.current_completion_snapshot, tool_chunks


@pytest.mark.network
@pytest.mark.anyio
async def test_the_sim_streams_tool_calls_for_a_share_of_rounds(sim):
    tools = tool_definitions(6)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    async with openai.AsyncOpenAI(base_url=sim.url + "/v1", api_key="unused", max_retries=0, timeout=10) as client:
        calling = 0
        for i in range(24):
            completion, tool_chunks = await sdk_round(client, messages_for(i), tools)
            choice = completion.choices[0]
            if not choice.message.tool_calls:
                assert choice.finish_reason == "length" and choice.message.content
                continue
            calling += 1
            assert choice.finish_reason == "tool_calls"
            for tc in choice.message.tool_calls:
                arguments = json.loads(tc.function.arguments)  # valid JSON, and fits the tool's schema
                assert set(schemas[tc.function.name]["required"]) <= set(arguments)
                assert tc.id and tc.type == "function"
            # Each tool-call chunk is one engine token, paced like content tokens.
            assert completion.usage.completion_tokens == tool_chunks
        assert 4 <= calling <= 20, calling  # deterministic per request; about half of 24


@pytest.mark.network
def test_the_sim_shapes_its_tool_deltas_as_its_dialect_does(sim, request):
    body = {"model": "sim-model", "messages": messages_for(0), "tools": tool_definitions(3), "stream": True,
            "tool_choice": "required", "max_tokens": 64}
    with httpx.stream("POST", sim.url + "/v1/chat/completions", json=body, timeout=10) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    deltas = [d for c in chunks for choice in c["choices"] for d in choice["delta"].get("tool_calls") or ()]
    first, later = deltas[0], deltas[1]
    dialect = request.node.callspec.params["sim"]
    assert first["id"].startswith("chatcmpl-tool-" if dialect == "vllm" else "call_")
    if dialect == "vllm":  # vllm/tool_parsers/hermes_tool_parser.py: name only, then index and arguments only
        assert set(first) == {"id", "type", "index", "function"} and set(first["function"]) == {"name"}
        assert later == {"index": 0, "function": {"arguments": later["function"]["arguments"]}}
    else:  # SGLang's serving_chat.py: arguments "" beside the name; later deltas id and name null
        assert first["function"]["arguments"] == "" and first["type"] == "function"
        assert later["id"] is None and later["function"]["name"] is None and later["type"] == "function"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.network
@pytest.mark.anyio
async def test_tool_choice_decides_and_a_wrong_named_tool_is_rejected(sim):
    tools = tool_definitions(4)
    async with openai.AsyncOpenAI(base_url=sim.url + "/v1", api_key="unused", max_retries=0, timeout=10) as client:
        for i in range(6):
            none, _ = await sdk_round(client, messages_for(i), tools, tool_choice="none")
            assert not none.choices[0].message.tool_calls
            required, _ = await sdk_round(client, messages_for(i), tools, tool_choice="required")
            assert required.choices[0].message.tool_calls
            named, _ = await sdk_round(client, messages_for(i), tools,
                                       tool_choice={"type": "function", "function": {"name": "edit_file"}})
            assert [tc.function.name for tc in named.choices[0].message.tool_calls] == ["edit_file"]
        with pytest.raises(openai.BadRequestError, match="Tool 'nope' not found in tools list"):
            await sdk_round(client, messages_for(0), tools, tool_choice={"type": "function", "function": {"name": "nope"}})
        reply = await client.chat.completions.create(model="sim-model", messages=messages_for(1), tools=tools,
                                                     tool_choice="required", max_tokens=32)
        assert reply.choices[0].message.tool_calls and reply.choices[0].finish_reason == "tool_calls"


@pytest.mark.network
@pytest.mark.anyio
async def test_an_agent_loop_against_the_sim_grows_its_history_with_tool_results(sim):
    """What the driver does per round: start_round, stream with our reader, finish_round."""
    prompts = PromptSource(prompt_chars=60, tools=tool_definitions(5), tool_result_chars=200)
    history = History()
    kinds = []
    async with httpx.AsyncClient(timeout=httpx.Timeout(10)) as client:
        for round_index in range(1, 13):
            history.start_round(prompts, 7, round_index)
            kinds.append("continue" if history.messages[-1]["role"] == "tool" else "user")
            body = {"model": "sim-model", "messages": history.messages, "tools": history.tools, "stream": True,
                    "stream_options": {"include_usage": True}, "max_tokens": 24}
            decoder, reader = SSEDecoder(), ChunkReader()
            async with client.stream("POST", sim.url + "/v1/chat/completions", json=body) as response:
                assert response.status_code == 200, await response.aread()
                async for data in response.aiter_bytes():
                    _, _, failure = reader.feed(decoder.feed(data))
                    assert failure is None
            assert reader.done
            history.finish_round("".join(reader.reply), reader.tool_calls)
            assert_well_formed(history.messages)
    roles = [m["role"] for m in history.messages]
    assert "tool" in roles and "continue" in kinds and kinds[0] == "user"
    assert history.chars == sum(message_chars(m) for m in history.messages)


# --- recorded transcripts replayed from a prompts file -------------------------------------------

TRANSCRIPT = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Why does the router hang?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "read_logs", "arguments": '{"service": "router"}'}},
        {"id": "t2", "type": "function", "function": {"name": "get_metrics", "arguments": '{"service": "engine", "name": "q"}'}}]},
    {"role": "tool", "tool_call_id": "t1", "content": "pending = queue.get(timeout=30)"},
    {"role": "tool", "tool_call_id": "t2", "content": "num_queue_reqs 0"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "t3", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "router.py"}'}}]},
    {"role": "tool", "tool_call_id": "t3", "content": "def route(): ..."},
    {"role": "assistant", "content": "The router waits on an empty queue."},
    {"role": "user", "content": "Fix it."},
    {"role": "assistant", "content": "Done."},
]


def write_lines(tmp_path, *items) -> str:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def test_a_transcript_is_replayed_one_round_per_model_call(tmp_path):
    tools = tool_definitions(2)
    path = write_lines(tmp_path, {"turns": ["first", "second"]}, {"messages": TRANSCRIPT, "tools": tools},
                       {"messages": [{"role": "user", "content": "plain"}, {"role": "assistant", "content": "x"}]})
    source = load_prompt_file(path)
    # Existing formats are unchanged beside it.
    assert source.conversations[0] == ["first", "second"] and source.conversations[2] == ["plain"]
    sent = []
    h = History()
    for round_index in range(1, 6):
        h.start_round(source, 1, round_index)
        sent.append(list(h.messages))
        assert h.tools == tools and h.chars == sum(message_chars(m) for m in h.messages)
        h.finish_round("a live reply that the recording replaces", [call(call_id="live")])
    # Model calls: after the user's question, after each block of tool results, after "Fix it.";
    # then the transcript starts over.
    assert [len(s) for s in sent] == [2, 5, 7, 9, 2]
    assert all(s == TRANSCRIPT[:len(s)] for s in sent)
    assert_well_formed(sent[3])
    # The turns conversation beside it is still live: it grows with its replies.
    live = History()
    live.start_round(source, 0, 1)
    assert live.messages == [{"role": "user", "content": "first"}]


@pytest.mark.parametrize(("messages", "error"), [
    (TRANSCRIPT[:4], "tool_call 't2' of message #3 has no tool message at the end of the transcript; add "
                     '{"role": "tool", "tool_call_id": "t2", "content": "..."} after message #3'),
    (TRANSCRIPT[:3] + [TRANSCRIPT[3], {"role": "user", "content": "?"}],
     "tool_call 't2' of message #3 has no tool message before message #5 (user)"),
    (TRANSCRIPT[:3] + [{"role": "tool", "tool_call_id": "zz", "content": ""}],
     "message #4 (tool) answers tool_call_id 'zz', which no earlier assistant tool_call has; set tool_call_id"),
    (TRANSCRIPT[:4] + [TRANSCRIPT[3]], "message #5 (tool) answers tool_call_id 't1', again"),
    ([TRANSCRIPT[1], {"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}],
     "message #2 tool_call #1 (f) arguments must be a JSON object encoded as a string"),
    ([TRANSCRIPT[1], {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}],
     'message #2 tool_call #1 needs an "id"'),
    ([{"role": "assistant", "tool_calls": [call(call_id="x")]}, {"role": "tool", "tool_call_id": "x", "content": ""},
      {"role": "assistant", "tool_calls": [call(call_id="x")]}], "message #3 tool_call #1 reuses id 'x'"),
    ([{"role": "robot", "content": "hi"}, {"role": "tool", "tool_call_id": "a"}], "message #1 has role 'robot'"),
    ([{"role": "system", "content": "s"}, {"role": "assistant", "tool_calls": [call(call_id="x")]},
      {"role": "tool", "tool_call_id": "x", "content": ""}, {"role": "system", "content": "end"}],
     "the transcript never asks the model"),
])
def test_malformed_transcripts_are_refused_with_file_line_and_fix(tmp_path, messages, error):
    path = write_lines(tmp_path, {"turns": ["fine"]}, {"messages": messages})
    with pytest.raises(PromptFileError) as caught:
        load_prompt_file(path)
    text = str(caught.value)
    assert text.startswith(f"{path}:2: ") and error in text, text
    assert "\n" not in text


def test_transcript_tools_must_be_function_definitions(tmp_path):
    path = write_lines(tmp_path, {"messages": TRANSCRIPT, "tools": [{"type": "function"}]})
    with pytest.raises(PromptFileError, match=r':1: "tools" must be a list of'):
        load_prompt_file(path)
