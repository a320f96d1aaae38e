"""Agent profiles of kind `a2a`: what they take, and what start-up refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskservice.agents.profiles import ProfileError, load_profiles
from taskservice.agents.tools import BUILTIN_TOOLS
from taskservice.settings import Settings


def profiles(tmp_path: Path, body: str) -> dict[str, object]:
    path = tmp_path / "agents.toml"
    path.write_text(body)
    settings = Settings(database_url=None, agents_file=str(path))
    return dict(load_profiles(settings, known_tools=set(BUILTIN_TOOLS)))


def test_a_remote_profile_names_its_card_token_variable_and_skill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HELPER_TOKEN", "s3cret")
    loaded = profiles(
        tmp_path,
        '[agents.helper]\nkind = "a2a"\ncard_url = "https://agents.example/team"\n'
        'token_env = "HELPER_TOKEN"\nskill = "research"\n',
    )
    remote = loaded["helper"].remote  # type: ignore[attr-defined]
    assert remote.card == "https://agents.example/team/.well-known/agent-card.json"
    assert (remote.skill, remote.token()) == ("research", "s3cret")
    assert loaded["default"].remote is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ('kind = "a2a"', "needs an http(s) `card_url`"),
        ('kind = "a2a"\ncard_url = "ftp://x"', "needs an http(s) `card_url`"),
        ('kind = "a2a"\ncard_url = "https://x"\nmodel = "offline"', "takes no ['model']"),
        ('kind = "a2a"\ncard_url = "https://x"\ntoken_env = "NOT_SET_HERE"', "is not set"),
        ('kind = "remote"', "kind must be 'local' or 'a2a'"),
        ('card_url = "https://x"', "need kind 'a2a'"),
    ],
)
def test_a_misconfigured_remote_profile_stops_start_up(
    tmp_path: Path, body: str, said: str
) -> None:
    with pytest.raises(ProfileError) as refused:
        profiles(tmp_path, f"[agents.helper]\n{body}\n")
    assert said in str(refused.value)
