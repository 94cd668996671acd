"""The official openai SDK on the Responses API (`--client openai|openai-async --api responses`):
`client.responses.create(**body)` with `stream=True`, iterating the SDK's typed Responses events
(response.created, response.output_text.delta, response.function_call_arguments.delta,
response.completed, ...) as the openai Agents SDK and Python harnesses on /v1/responses do.

Everything but the call and the reading of its events is the chat client's
(repro/load/clients/openai_client.py): one SDK client per conversation over the SDK's own pool,
the transport wrapper that stamps every byte and reads the connection, the sync client's worker
thread and its bounded abandon, the SDK's retries logged with --client-timeouts native. The
Responses stream has no [DONE]: it ends with response.completed and the end of the body.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from repro.load.clients.base import ENDED_EARLY
from repro.load.clients.openai_client import OpenAIConversation, OpenAIFamily
from repro.load.clients.sdk_events import read_event, stream_failed
from repro.load.round import RoundFailureSeen, RoundState

if TYPE_CHECKING:
    from repro.core.responses_events import ResponsesReader
    from repro.load.clients.httpx_tap import Tap


class OpenAIResponsesFamily(OpenAIFamily):
    def conversation(self, conv: int) -> OpenAIResponsesConversation:
        return OpenAIResponsesConversation(self)


class OpenAIResponsesConversation(OpenAIConversation):
    PATH = "/responses"

    def _create(self, body: dict[str, Any]) -> Any:
        return self.client.responses.create(**body)

    def _chunk(self, state: RoundState, reader: ResponsesReader, event: Any) -> None:
        read_event(reader, state, event, self.hooks.now(), self.emit)

    def _malformed(self, exc: BaseException, state: RoundState, reader: ResponsesReader) -> RoundFailureSeen:
        return stream_failed(exc, state) or super()._malformed(exc, state, reader)

    def _ended(self, state: RoundState, reader: ResponsesReader, tap: Tap) -> RoundFailureSeen | None:
        return None if reader.done else ENDED_EARLY["responses"]
