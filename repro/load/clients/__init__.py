"""The HTTP clients the driver can stream through, one module each, behind one small interface
(repro/load/clients/base.py): aiohttp (the default: the fastest), httpx, the official openai SDK,
async and sync (chat, and responses: `responses.create(stream=True)`), and the official anthropic
SDK, async and sync (messages). Each drives the real library with its own pool and keep-alive, and reports
every round's local port and whether its connection was reused from the library's own hooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from repro.core.errors import UsageError
from repro.load.connection_policy import parse_connections

if TYPE_CHECKING:
    from repro.load.clients.base import ClientFamily, RoundHooks

CLIENTS = ("aiohttp", "httpx", "openai", "openai-async", "anthropic-async", "anthropic")
TIMEOUT_MODES = ("repro", "native")


def check_client_options(client: str, connections: str, client_timeouts: str) -> None:
    if client not in CLIENTS:
        raise UsageError(f"--client {client!r} is not one of {', '.join(CLIENTS)}")
    parse_connections(connections)
    if connections != "per-conversation" and client != "aiohttp":
        raise UsageError(f"--connections {connections} applies to --client aiohttp only ({client} keeps its own "
                         "pool, as a harness using it would); drop --connections or use --client aiohttp")
    if client_timeouts not in TIMEOUT_MODES:
        raise UsageError(f"--client-timeouts {client_timeouts!r} is not one of {', '.join(TIMEOUT_MODES)}")
    if client.startswith("openai"):
        require_openai()
    if client.startswith("anthropic"):
        require_anthropic()


def require_openai() -> None:
    """The SDK is optional (most runs never use it); the clients need a 3.x SDK, which runs on httpx2."""
    try:
        import httpx2  # noqa: F401
        import openai
        from openai import DefaultAsyncHttpxClient, DefaultHttpxClient  # noqa: F401
    except ImportError:
        raise UsageError("--client openai needs the openai SDK 3.x, which is not installed; "
                         "run `pip install 'repro[openai]'` (or `pip install 'openai>=3'`)") from None
    if int(openai.__version__.split(".")[0]) < 3:
        raise UsageError(f"--client openai needs the openai SDK 3.x (on httpx2), found {openai.__version__}; "
                         "run `pip install 'openai>=3'`")


def require_anthropic() -> None:
    """The SDK is optional: only `--client anthropic` and `anthropic-async` need it."""
    try:
        import anthropic  # noqa: F401
    except ImportError:
        raise UsageError("--client anthropic and anthropic-async need the anthropic SDK, which is not installed; run "
                         "`pip install 'repro[anthropic]'` (or `pip install anthropic`)") from None


def client_family(hooks: RoundHooks) -> ClientFamily:
    """The client its options name; imported lazily so that aiohttp runs import nothing else.
    Made on the running loop (aiohttp and the SDK clients hold on to it)."""
    name = hooks.options.client
    if name == "aiohttp":
        from repro.load.clients.aiohttp_client import AiohttpFamily

        return AiohttpFamily(hooks)
    if name == "httpx":
        from repro.load.clients.httpx_client import HttpxFamily

        return HttpxFamily(hooks)
    if name in ("openai", "openai-async") and hooks.options.api == "responses":
        require_openai()
        from repro.load.clients.openai_responses_client import OpenAIResponsesFamily

        return OpenAIResponsesFamily(hooks, sync=name == "openai")
    if name in ("openai", "openai-async"):
        require_openai()
        from repro.load.clients.openai_client import OpenAIFamily

        return OpenAIFamily(hooks, sync=name == "openai")
    if name == "anthropic-async":
        require_anthropic()
        from repro.load.clients.anthropic_client import AnthropicFamily

        return AnthropicFamily(hooks)
    if name == "anthropic":
        require_anthropic()
        from repro.load.clients.anthropic_sync_client import AnthropicSyncFamily

        return AnthropicSyncFamily(hooks)
    raise UsageError(f"client {name!r} is not one of {', '.join(CLIENTS)}")
