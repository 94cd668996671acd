"""What each hop of a stack says it is running: its deployment state, read once, secrets redacted.

Every hop is read from what it exposes, concurrently, under one deadline for the whole record:

- engine: SGLang's `/server_info` (every server argument; `/get_server_info` on releases that
  lack it), `/version` (vLLM; SGLang 0.5.23 has none), `/v1/models`;
- router: its own `/get_server_info` (sglang-router 0.3.2 answers with its worker count; smg 1.13
  proxies it to a worker, so that answer is the worker's and is not recorded as the router's),
  `/workers`, `/version` (neither router serves one: recorded as not exposed), `/v1/models`;
- proxy: the `Server` and `Via` headers of a cheap `GET /v1/models` through it, and the version
  in a `*_build_info` series of its stats page when it has one (HAProxy's exporter does).

What could not be read is recorded as such ("not exposed (http 404)", the error, "no answer
within the deadline"), never guessed. A hop's record is a plain JSON-ready dict whose `settings`
are flat (`server_info.cuda_graph_max_bs`: 48), so that two records diff key by key. Values
that change on every read (load, timestamps, ids) are left out: they are state, not deployment.

Secrets: a server may report its own keys (SGLang's /server_info lists `api_key` in clear, and
its launch_command repeats it). Any field whose name holds a key/token/secret/password word is
kept only as set or unset, command-line flags of that kind and credentials in URLs are masked in
every string, as are such fields inside JSON config strings, query parameters and `NAME=value`
assignments; the caller's own API key is removed wherever it appears. A name that ends in a
descriptor (`speculative_token_map`: a path) is a setting, so that its change shows in a diff.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx

from probes.scrape import connect_reason, shared_tls
from repro.core.hop import Hop, origin_of
from repro.core.text import REDACTED, without_secret
from repro.io.tls import rejection

DEFAULT_TIMEOUT_S = 2.0
MAX_BODY_BYTES = 1 << 20  # a deployment answer is a few kB; a stats page a few hundred
# A record's `read` says per endpoint what happened, in words a person reads in the run log. Three
# of them are answers (nothing about the hop is unknown): these constants, compared whole. Any other
# word is a failure to read (an error, no answer in time) and says which.
OK = "ok"
NOT_EXPOSED = "not exposed (http 404)"
NONE_GIVEN = "none given: not read"
ANSWERED = frozenset({OK, NOT_EXPOSED, NONE_GIVEN})

# Words that make a field a secret. Whole words, so that `tokenizer_path` and
# `max_total_num_tokens` stay readable settings while `api_key`, `hf_token`, `admin_api_key`,
# `ssl_keyfile_password` do not.
SECRET_WORDS = frozenset({"key", "keys", "apikey", "keyfile", "token", "secret", "secrets", "password", "passwd",
                          "credential", "credentials", "auth", "authorization", "cookie", "signature", "sig"})
# A name that ends in one of these names something about a secret (where it lives, how big it is),
# not the secret: `speculative_token_map` is a file path whose change a diff must show.
DESCRIPTOR_WORDS = frozenset({"map", "path", "dir", "file", "len", "size", "num", "count", "limit", "type", "mode"})
# Fields that describe the moment, not the deployment: left out so that a diff shows settings only.
VOLATILE = frozenset({"internal_states", "startup_time", "status", "timestamp", "created", "load", "loads",
                      "engine_load", "is_healthy", "id", "health", "last_gen_throughput", "memory_usage"})
_URL_CREDENTIALS = re.compile(r"(\b[a-z][a-z0-9+.-]*://)[^/\s@]+@", re.IGNORECASE)
_BEARER = re.compile(r"(bearer\s+)\S+", re.IGNORECASE)
# Secrets inside strings that are not flags: a JSON (or Python-repr) field in a config string
# (`--kv-transfer-config '{"hf_token": ...}'`), a URL's query parameter (`?X-Amz-Signature=...`),
# an environment assignment before a command (`HF_TOKEN=... python ...`).
_QUOTED_FIELD = re.compile(r"""(["'])([^"'\\]+)\1(\s*:\s*)(["'])((?:(?!\4)[^\\]|\\.)*)\4""")
_BARE_FIELD = re.compile(r"""(["'])([^"'\\]+)\1(\s*:\s*)(-?[\w.+-]+)""")  # "password": 12345
_QUERY_PARAM = re.compile(r"([?&;])([^=&\s#'\"]+)=([^&\s#'\"]*)")
# NAME=value, NAME="value" or NAME='value': the value runs to the closing quote or the next space.
_ASSIGNMENT = re.compile(r"""(?<![^\s'"])([A-Za-z_][A-Za-z0-9_.-]*)=("[^"]*"|'[^']*'|[^\s'"]+)""")
_BUILD_INFO = re.compile(r"^(\w*build_info)\{([^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# What each role is read at (the keys of a record's `read`).
EXPECTED = {"engine": ("/server_info", "/version", "/v1/models"),
            "router": ("/get_server_info", "/workers", "/version", "/v1/models"),
            "proxy": ("GET /v1/models (headers)", "stats page")}


def is_secret_name(name: str, *, descriptors: bool = True) -> bool:
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    if descriptors and len(words) > 1 and words[-1] in DESCRIPTOR_WORDS:
        return False
    return any(w in SECRET_WORDS or w.endswith(("apikey", "secret", "password")) for w in words)


def _mask_named(text: str) -> str:
    """Secret-named fields, query parameters and assignments inside a string, value masked."""
    text = _QUOTED_FIELD.sub(lambda m: m.group(0) if not is_secret_name(m.group(2)) or not m.group(5) else
                             f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{m.group(4)}{REDACTED}{m.group(4)}", text)
    text = _BARE_FIELD.sub(lambda m: m.group(0) if not is_secret_name(m.group(2)) or m.group(4) in ("null", "None")
                           else f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}\"{REDACTED}\"", text)
    # Assignments before query parameters: `PASSWORD=ab&cd` is one value, not a query's first pair.
    text = _ASSIGNMENT.sub(lambda m: f"{m.group(1)}={REDACTED}" if is_secret_name(m.group(1)) else m.group(0), text)
    return _QUERY_PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}={REDACTED}"
                            if is_secret_name(m.group(2)) and m.group(3) else m.group(0), text)


def redact_text(text: str, api_key: str | None = None) -> str:
    """Mask secrets inside a string: `--api-key X` flags, `Bearer X`, `scheme://user:pass@`."""
    text = without_secret(text, api_key)
    text = _URL_CREDENTIALS.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    text = _mask_named(text)
    # Token by token, not one regex over the line: a boolean flag (`--enable-metrics --api-key X`)
    # must not swallow the secret flag as its value. Masked in place, so the text keeps its spacing.
    try:
        tokens = shlex.split(text)
    except ValueError:  # unbalanced quotes: not a command line shlex can parse
        tokens = text.split()
    for secret in _flag_values(tokens):
        # The value as a whole token: after a space, `=` or a quote; never a substring of another word.
        text = re.sub(rf"(?<![^\s='\"]){re.escape(secret)}(?![^\s'\"])", REDACTED, text)
    return text


def redact_command(tokens: list[Any], api_key: str | None = None) -> list[Any]:
    """A launch command given as a list (argv): the token after a secret-named flag is masked, as
    in a string, so that the value is seen as its flag's value and not element by element."""
    secrets = set(_flag_values([t for t in tokens if isinstance(t, str)]))
    return [REDACTED if isinstance(t, str) and t in secrets else redact_text(t, api_key) if isinstance(t, str) else t
            for t in tokens]


def _flag_values(tokens: list[str]) -> list[str]:
    """The values of secret-named flags: `--flag=value`, or the next token unless it is a flag."""
    values = []
    for index, token in enumerate(tokens):
        if not token.startswith("-"):
            continue
        flag, equals, value = token.partition("=")
        if not is_secret_name(flag.lstrip("-")):
            continue
        if equals:
            if value:
                values.append(value)
        elif index + 1 < len(tokens) and not tokens[index + 1].startswith("-") and tokens[index + 1]:
            values.append(tokens[index + 1])
    return [v for v in values if v != REDACTED]


def redact(value: Any, api_key: str | None = None, name: str = "", *, inside_secret: bool = False) -> Any:
    """A JSON value with its secrets masked: a secret-named field (or anything under one) keeps
    only whether it is set."""
    secret = inside_secret or bool(name and (is_secret_name(name) or (
        # `api_key_map` holding keys is no path: the descriptor exemption is for plain values only.
        isinstance(value, (dict, list)) and is_secret_name(name, descriptors=False))))
    if secret and not isinstance(value, (dict, list)):
        return REDACTED if value not in (None, "", False) else value
    if isinstance(value, dict):
        return {k: redact(v, api_key, str(k), inside_secret=secret) for k, v in value.items()}
    if isinstance(value, list):
        # An argv-like list (`launch_command` as a list): a flag's value is the next element.
        value = redact_command(value, api_key)
        return [redact(v, api_key, inside_secret=secret) for v in value]
    if isinstance(value, str):
        return redact_text(value, api_key)
    return value


def flatten(value: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    """Nested dicts as dotted keys; a list stays one value (JSON text), compared whole."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in VOLATILE:
                flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, list):
        out[prefix] = json.dumps(value, sort_keys=True, separators=(",", ":"))
    else:
        out[prefix] = value
    return out


class _Read:
    """One hop's answers as they come in; what is still missing at the deadline says so."""

    def __init__(self, hop: Hop, timeout: float) -> None:
        self.hop = hop
        self.settings: dict[str, Any] = {}
        self.unanswered = f"no answer within the {timeout:g} s deadline"
        # Every endpoint starts unanswered; an answer (or a refusal) overwrites it.
        self.read: dict[str, str] = dict.fromkeys(EXPECTED.get(hop.role, EXPECTED["engine"]), self.unanswered)

    def record(self) -> dict[str, Any]:
        return {"role": self.hop.role, "url": redact_text(origin_of(self.hop.url)),
                "settings": dict(sorted(self.settings.items())), "read": self.read}


async def _get(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> tuple[httpx.Response | None, bytes, str]:
    """One bounded GET (the caller's deadline cancels it): the response, its body (capped), and
    what happened in words."""
    try:
        async with client.stream("GET", url, headers=headers) as response:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_BODY_BYTES:
                    return response, b"", f"answer over {MAX_BODY_BYTES >> 10} kB: not read"
            if response.status_code == 404:
                return response, bytes(body), NOT_EXPOSED
            if response.status_code != 200:
                return response, bytes(body), f"http {response.status_code}"
            return response, bytes(body), OK
    except httpx.TimeoutException:
        return None, b"", "no answer within the deadline"
    except httpx.HTTPError as exc:
        tls = rejection(exc)
        return None, b"", f"error: {tls.text if tls is not None else connect_reason(exc)}"
    except Exception as exc:  # e.g. httpx.InvalidURL: a record says what happened, it never raises
        return None, b"", f"error: {type(exc).__name__}: {exc}"


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _headers_into(state: _Read, response: httpx.Response | None, api_key: str | None) -> None:
    if response is None:
        return
    for header in ("server", "via"):
        value = response.headers.get(header)
        if value is not None and f"http.{header}" not in state.settings:
            state.settings[f"http.{header}"] = redact_text(value, api_key)


async def _engine(state: _Read, client: httpx.AsyncClient, base: str, headers: dict[str, str],
                  api_key: str | None) -> None:
    async def server_info() -> None:
        path = "/server_info"
        response, body, outcome = await _get(client, base + path, headers)
        if outcome == NOT_EXPOSED:
            state.read[path] = outcome
            path = "/get_server_info"  # SGLang before /server_info was added; vLLM answers 404 to both
            state.read[path] = state.unanswered
            response, body, outcome = await _get(client, base + path, headers)
        info = _json(body) if outcome == OK else None
        if outcome == OK and not isinstance(info, dict):
            outcome = "answer is not a JSON object"
        state.read[path] = outcome
        _headers_into(state, response, api_key)
        if isinstance(info, dict):
            flatten(redact(info, api_key), "server_info", state.settings)
            if isinstance(info.get("version"), str):
                state.settings.setdefault("version", info["version"])

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server_info)
        tasks.start_soon(_version, state, client, base, headers, api_key)
        tasks.start_soon(_models, state, client, base, headers, api_key)


async def _version(state: _Read, client: httpx.AsyncClient, base: str, headers: dict[str, str],
                   api_key: str | None) -> None:
    """`/version`, where vLLM answers with its release; a hop without it is recorded as not exposed."""
    response, body, outcome = await _get(client, base + "/version", headers)
    answer = _json(body) if outcome == OK else None
    if outcome == OK and not (isinstance(answer, dict) and "version" in answer):
        outcome = "answer has no version field"
    state.read["/version"] = outcome
    _headers_into(state, response, api_key)
    if isinstance(answer, dict) and "version" in answer:
        state.settings["version"] = redact(answer["version"], api_key)


async def _get_list(client: httpx.AsyncClient, url: str, headers: dict[str, str],
                    field: str) -> tuple[httpx.Response | None, list | None, str]:
    """A GET whose answer is a JSON object holding a list under `field` (`data`, `workers`)."""
    response, body, outcome = await _get(client, url, headers)
    answer = _json(body) if outcome == OK else None
    listed = answer.get(field) if isinstance(answer, dict) else None
    if not isinstance(listed, list):
        return response, None, f"answer has no {field} list" if outcome == OK else outcome
    return response, listed, outcome


async def _models(state: _Read, client: httpx.AsyncClient, base: str, headers: dict[str, str],
                  api_key: str | None) -> None:
    response, cards, outcome = await _get_list(client, base + "/v1/models", headers, "data")
    state.read["/v1/models"] = outcome
    _headers_into(state, response, api_key)
    if isinstance(cards, list):
        cards = [c for c in cards if isinstance(c, dict)]
        state.settings["models"] = ",".join(sorted(str(c.get("id")) for c in cards))
        for card in cards:
            rest = {k: v for k, v in card.items() if k not in ("id", "object")}
            flatten(redact(rest, api_key), f"model.{card.get('id')}", state.settings)


async def _router(state: _Read, client: httpx.AsyncClient, base: str, headers: dict[str, str],
                  api_key: str | None) -> None:
    async def own_info() -> None:
        response, body, outcome = await _get(client, base + "/get_server_info", headers)
        info = _json(body) if outcome == OK else None
        if isinstance(info, dict) and "router_manager" not in info:
            # smg forwards /get_server_info to a worker: the answer is that engine's, not the router's.
            outcome = "answered by a worker (the router forwards it): not the router's own"
            info = None
        state.read["/get_server_info"] = outcome
        _headers_into(state, response, api_key)
        if isinstance(info, dict):
            flatten(redact(info, api_key), "router_info", state.settings)

    async def workers() -> None:
        _, listed, outcome = await _get_list(client, base + "/workers", headers, "workers")
        state.read["/workers"] = outcome
        if isinstance(listed, list):
            listed = sorted((w for w in listed if isinstance(w, dict)), key=lambda w: str(w.get("url")))
            state.settings["workers.count"] = len(listed)
            for index, worker in enumerate(listed):
                flatten(redact({k: v for k, v in worker.items() if k != "url"}, api_key), f"workers.{index}",
                        state.settings)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(own_info)
        tasks.start_soon(workers)
        tasks.start_soon(_version, state, client, base, headers, api_key)
        tasks.start_soon(_models, state, client, base, headers, api_key)


async def _proxy(state: _Read, client: httpx.AsyncClient, base: str, headers: dict[str, str],
                 api_key: str | None) -> None:
    async def through() -> None:
        # A cheap request that every OpenAI-style stack answers; only its headers are kept, which are
        # the proxy's own where it sets them (nginx: Server nginx/1.22.1) and the upstream's where it
        # passes them on (HAProxy sets none): recorded as seen, under the name of the header.
        response, _, outcome = await _get(client, base + "/v1/models", headers)
        state.read["GET /v1/models (headers)"] = outcome if response is None else OK
        _headers_into(state, response, api_key)
        if response is not None:
            for header in ("server", "via"):
                state.settings.setdefault(f"http.{header}", "not sent")

    async def stats_page() -> None:
        url = state.hop.metrics_url
        if not url:
            state.read["stats page"] = NONE_GIVEN
            return
        _, body, outcome = await _get(client, url, {})
        state.read["stats page"] = outcome
        if outcome != OK:
            return
        found = False
        for name, labels in _BUILD_INFO.findall(body.decode("utf-8", errors="replace")):
            for label, value in _LABEL.findall(labels):
                if label == "version" or label.endswith("version"):
                    state.settings[f"{name}.{label}"] = redact_text(value, api_key)
                    found = True
        if not found:
            state.read["stats page"] = "read: no *_build_info version in it"

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(through)
        tasks.start_soon(stats_page)


READERS = {"engine": _engine, "router": _router, "proxy": _proxy}


async def record_deployment(hops: Sequence[Hop], *, timeout: float = DEFAULT_TIMEOUT_S,
                            api_key: str | None = None,
                            known: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Each hop's deployment state, {hop name: record}, read concurrently within `timeout` seconds
    in all. Never raises on network trouble: what was not read says why in the record's `read`.
    `known`: records of hops the caller started itself (local_record), taken as they are and not
    read over the network (a request to a fault proxy would count toward its fault)."""
    known = known or {}
    states = [_Read(hop, timeout) for hop in hops if hop.name not in known]
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    client = httpx.AsyncClient(trust_env=False, follow_redirects=False, verify=shared_tls(),
                               timeout=httpx.Timeout(timeout),
                               limits=httpx.Limits(max_connections=8 * max(1, len(hops))))
    try:
        with anyio.move_on_after(timeout):
            async with anyio.create_task_group() as tasks:
                for state in states:
                    reader = READERS.get(state.hop.role, _engine)
                    tasks.start_soon(reader, state, client, origin_of(state.hop.url), headers, api_key)
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
            await client.aclose()
    read = {state.hop.name: state.record() for state in states}
    return {hop.name: known.get(hop.name) or read[hop.name] for hop in hops}


def local_record(role: str, url: str, settings: dict[str, Any], source: str) -> dict[str, Any]:
    """A hop this tool started itself (the injected fault proxy): its state is known, not read."""
    return {"role": role, "url": redact_text(origin_of(url)) if urlsplit(url).scheme else url,
            "settings": dict(sorted(flatten(redact(settings), "", {}).items())), "read": {source: OK}}


def fault_proxy_record(url: str, spec: str, mode: str) -> dict[str, Any]:
    """repro's own fault proxy (mitmproxy with proxies/addon.py), as `repro run --inject` starts it."""
    from importlib import metadata

    try:
        version = metadata.version("mitmproxy")
    except metadata.PackageNotFoundError:
        version = "not installed"
    return local_record("proxy", url, {"software": "repro fault proxy (mitmproxy)", "mitmproxy": version,
                                       "fault": spec, "mode": mode}, source="started by this run")
