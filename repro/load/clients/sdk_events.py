"""The typed stream events an SDK hands over (the openai SDK's Responses events, the anthropic
SDK's Messages events), read by the same pure readers as the byte-reading clients, from each
event's own JSON: one event of the SDK is one SSE event of the wire.

Shared by the SDK clients that iterate event objects rather than chat chunks
(repro/load/clients/openai_responses_client.py, anthropic_sync_client.py)."""

from __future__ import annotations

from typing import Any

from repro.core import events as ev
from repro.core.sse import SSEEvent
from repro.load.round import RoundFailureSeen, RoundState


class StreamFailed(ValueError):
    """An event that ends the round's trust in its stream (an `error` event, a malformed one): raised
    out of the SDK's iteration so the conversation's malformed-event path closes the stream."""

    def __init__(self, failure: str) -> None:
        super().__init__(failure)
        self.failure = failure


def read_event(reader: Any, state: RoundState, event: Any, now: float, emit) -> None:
    """One SDK event: fed to the API's reader (its JSON as the SSE data), recorded as one read."""
    chars, done, failure = reader.feed([SSEEvent(event.to_json(indent=None).encode())])
    if failure is not None:
        raise StreamFailed(failure)
    state.progressed(now, reader.events, chars, done)
    emit(ev.SSEReceived(t=now, conv=state.conv, round=state.round, seq=reader.events, chars=chars, done=done,
                        events=1))


def stream_failed(exc: BaseException, state: RoundState) -> RoundFailureSeen | None:
    """The round's error for a StreamFailed; None for any other malformed event."""
    if isinstance(exc, StreamFailed):
        return RoundFailureSeen(state.phase, exc.failure, 200, "stream")
    return None
