"""Pointing a harness at a URL of ours (the fault proxy in front of the first hop, or the first hop
itself) the three ways harnesses read where their engine is:

- environment variables: `OPENAI_BASE_URL` (the openai SDKs, Codex CLI), `OPENAI_API_BASE`
  (LiteLLM and so aider, OpenHands), with `/v1` as those SDKs expect; `ANTHROPIC_BASE_URL` (the
  anthropic SDKs, Claude Code) without it, as the Anthropic SDK adds `/v1/messages` itself;
- a `{proxy_url}` placeholder in the command's arguments (the root URL, no `/v1`: the command says
  what path it wants, e.g. `--base-url {proxy_url}/v1`);
- a config file the harness reads from its working folder (opencode's `opencode.json`,
  `provider.*.options.baseURL`): `--config-template FILE` is rendered there (its `{proxy_url}`
  replaced) under the template's own name, less a `.template`/`.tmpl` ending, and the file it
  replaced put back afterwards (or the rendered one removed when there was none). A copy of the
  original is kept beside it until then (`.NAME.repro-original`), so a wrap killed outright
  leaves the user's file recoverable, and the next wrap puts it back before rendering.

Placeholders are replaced as plain text, never with str.format: JSON's own braces stay as they are.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from repro.core.errors import UsageError

PLACEHOLDER = "{proxy_url}"
OPENAI_VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_BASE")  # the openai SDKs' and LiteLLM's, with /v1
ANTHROPIC_VARIABLES = ("ANTHROPIC_BASE_URL",)  # the anthropic SDKs', the root
BASE_URL_VARIABLES = OPENAI_VARIABLES + ANTHROPIC_VARIABLES
TEMPLATE_ENDINGS = (".template", ".tmpl")
MAX_TEMPLATE_BYTES = 1 << 20  # a config file, not a data set


@dataclass(frozen=True)
class Injection:
    """Where the harness is pointed: `url` the root (scheme, host, port), no path."""

    url: str

    @property
    def root(self) -> str:
        return self.url.rstrip("/")

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """`base` with the base-URL variables harnesses read set to ours."""
        env = dict(base)
        env.update({name: self.root + "/v1" for name in OPENAI_VARIABLES})
        env.update({name: self.root for name in ANTHROPIC_VARIABLES})
        return env

    def command(self, argv: Sequence[str]) -> list[str]:
        """The command with every `{proxy_url}` replaced by our root URL."""
        return [arg.replace(PLACEHOLDER, self.root) for arg in argv]

    def render(self, text: str) -> str:
        return text.replace(PLACEHOLDER, self.root)


def rendered_name(template: Path) -> str:
    """`opencode.json.template` -> `opencode.json`; a name with no such ending stays as it is."""
    for ending in TEMPLATE_ENDINGS:
        if template.name.endswith(ending) and len(template.name) > len(ending):
            return template.name[: -len(ending)]
    return template.name


def read_template(template: Path) -> str:
    """The template's text; a file that cannot be read is a one-line UsageError naming it."""
    try:
        if template.stat().st_size > MAX_TEMPLATE_BYTES:
            raise UsageError(f"--config-template {template}: larger than {MAX_TEMPLATE_BYTES} bytes; give the "
                             "harness's config file, with {proxy_url} where its base URL goes")
        return template.read_text()
    except FileNotFoundError:
        raise UsageError(f"--config-template {template}: no such file; give the harness's config file with "
                         "{proxy_url} where its base URL goes") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--config-template {template}: cannot be read as text ({exc}); give a text file") from None


def _backup_of(target: Path) -> Path:
    return target.with_name(f".{target.name}.repro-original")


def restore_left_over(target: Path) -> None:
    """A copy of the original left by a wrap that was killed before it could put it back: put it back."""
    backup = _backup_of(target)
    if backup.exists():
        os.replace(backup, target)


@contextmanager
def rendered_config(template: Path, folder: Path, injection: Injection) -> Iterator[Path]:
    """The template rendered into `folder` for the harness's life; the original back afterwards.
    Yields the rendered file's path."""
    text = injection.render(read_template(template))
    if not folder.is_dir():
        raise UsageError(f"working folder {folder}: not a folder; give the harness's project folder")
    target = folder / rendered_name(template)
    if target.resolve() == template.resolve():
        raise UsageError(f"--config-template {template} would be rendered over itself in {folder}: name it "
                         f"{template.name}.template (or keep it outside the working folder)")
    restore_left_over(target)
    backup = _backup_of(target)
    had_original = target.exists()
    try:
        if had_original:
            os.replace(target, backup)
        target.write_text(text)
    except OSError as exc:
        if had_original and backup.exists() and not target.exists():
            os.replace(backup, target)
        raise UsageError(f"--config-template: cannot write {target} ({exc.strerror or exc}); check the folder's "
                         "permissions") from None
    try:
        yield target
    finally:
        if had_original:
            os.replace(backup, target)
        else:
            target.unlink(missing_ok=True)
