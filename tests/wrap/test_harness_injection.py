"""Pointing a harness at our URL (repro/session/harness_injection.py): its variables, the command's
placeholder, a config file rendered into its folder and the original put back."""

from __future__ import annotations

import json

import pytest

from repro.core.errors import UsageError
from repro.session.harness_injection import Injection, rendered_config, rendered_name

URL = "http://127.0.0.1:4321/"
OPENCODE = {"provider": {"local": {"npm": "@ai-sdk/openai-compatible",
                                   "options": {"baseURL": "{proxy_url}/v1", "apiKey": "x"}}}}


def test_variables_each_as_its_sdk_expects():
    env = Injection(URL).environment({"HOME": "/h", "OPENAI_BASE_URL": "http://elsewhere/v1"})
    assert env == {"HOME": "/h", "OPENAI_BASE_URL": "http://127.0.0.1:4321/v1",
                   "OPENAI_API_BASE": "http://127.0.0.1:4321/v1", "ANTHROPIC_BASE_URL": "http://127.0.0.1:4321"}


def test_placeholder_in_the_command_and_json_braces_untouched():
    argv = Injection(URL).command(["h", "--base-url", "{proxy_url}/v1", '{"a": {}}'])
    assert argv == ["h", "--base-url", "http://127.0.0.1:4321/v1", '{"a": {}}']


def test_names():
    from pathlib import Path

    assert rendered_name(Path("x/opencode.json.template")) == "opencode.json"
    assert rendered_name(Path("opencode.json.tmpl")) == "opencode.json"
    assert rendered_name(Path("opencode.json")) == "opencode.json"


def test_config_rendered_then_original_restored(tmp_path):
    template = tmp_path / "opencode.json.template"
    template.write_text(json.dumps(OPENCODE))
    project = tmp_path / "project"
    project.mkdir()
    (project / "opencode.json").write_text("the user's own")
    with rendered_config(template, project, Injection(URL)) as target:
        assert target == project / "opencode.json"
        assert json.loads(target.read_text())["provider"]["local"]["options"]["baseURL"] == "http://127.0.0.1:4321/v1"
    assert (project / "opencode.json").read_text() == "the user's own"
    assert sorted(p.name for p in project.iterdir()) == ["opencode.json"]


def test_config_removed_when_there_was_none_even_after_an_error(tmp_path):
    template = tmp_path / "opencode.json.template"
    template.write_text(json.dumps(OPENCODE))
    project = tmp_path / "project"
    project.mkdir()
    with pytest.raises(RuntimeError), rendered_config(template, project, Injection(URL)):
        raise RuntimeError("the harness failed")
    assert list(project.iterdir()) == []


def test_an_original_left_by_a_killed_wrap_is_put_back(tmp_path):
    template = tmp_path / "opencode.json.template"
    template.write_text("{proxy_url}")
    project = tmp_path / "project"
    project.mkdir()
    (project / "opencode.json").write_text("rendered by a wrap that was killed")
    (project / ".opencode.json.repro-original").write_text("the user's own")
    with rendered_config(template, project, Injection(URL)) as target:
        assert target.read_text() == "http://127.0.0.1:4321"
    assert (project / "opencode.json").read_text() == "the user's own"
    assert not (project / ".opencode.json.repro-original").exists()


@pytest.mark.parametrize("case", ["missing", "over-itself", "no-folder"])
def test_bad_templates_are_one_line(tmp_path, case):
    template = tmp_path / ("opencode.json" if case == "over-itself" else "opencode.json.template")
    if case != "missing":
        template.write_text("{}")
    folder = tmp_path / "nowhere" if case == "no-folder" else tmp_path
    with pytest.raises(UsageError) as caught, rendered_config(template, folder, Injection(URL)):
        pass
    assert "\n" not in str(caught.value)
