"""Memory's embedders: the ``model`` one (the memory-model extra) finds paraphrases that
share no word with the memory, loads from its wheel without the network, and is chosen by
``SESSIONSTREAM_MEMORY_EMBEDDER``; a bad name or a missing extra says how to fix it."""

from __future__ import annotations

import random
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from sessionstream.core.memory import Actor, Role
from sessionstream.core.memory.search import HashingEmbedder, tokenize
from sessionstream.core.settings import Env, Settings, SettingsError
from sessionstream.integrations.memory import InMemoryBackend, MemoryClient
from sessionstream.integrations.memory_embed import (
    ModelEmbedder,
    ModelUnavailable,
    default_embedder,
    embedder_for,
)

#: (memory, a question asking for it with none of its words but these function words)
PARAPHRASES = [
    ("I am vegetarian and never eat meat", "what diet does the user follow"),
    ("I prefer answers in French", "which language should replies be written"),
    ("I live in Lisbon", "where is the user based"),
    ("Always use metric units", "measurement system preference"),
    ("My favourite colour is green", "what color do they like"),
    ("I am allergic to peanuts", "any food allergies"),
    ("My manager is called Dana", "who is their boss"),
    ("I work night shifts", "when does she have her job hours"),
    ("Prefers dark mode in editors", "theme of the IDE"),
    ("Plays the cello in an orchestra", "musical instrument hobby"),
]
FUNCTION_WORDS = {"i", "am", "the", "in", "is", "and", "a", "an", "of", "my", "do", "does"}
DISTRACTORS = ["Booked a dentist appointment", "Bought a new bicycle", "Reads crime novels",
               "Moved the meeting to Thursday", "Has a spare key at the office",
               "Renewed the passport last year", "Follows a football club",
               "Keeps receipts in a folder", "Drives a hybrid car", "Visited Norway twice"]


@pytest.fixture
def fresh_model() -> Iterator[None]:
    """The model as a new process would load it (the class keeps one per process)."""
    kept = ModelEmbedder._loaded
    ModelEmbedder._loaded = None
    yield
    ModelEmbedder._loaded = kept


def test_the_paraphrases_share_no_word_with_their_memory() -> None:
    for memory, question in PARAPHRASES:
        shared = set(tokenize(memory)) & set(tokenize(question)) - FUNCTION_WORDS
        assert not shared, (memory, question, shared)


def _recall(embedder: Any) -> int:
    mem = MemoryClient(InMemoryBackend("default"),
                       Actor(Role.AGENT, "agent-1", tenant="default", user="ada"),
                       embedder=embedder)
    texts = [m for m, _ in PARAPHRASES] + DISTRACTORS * 3
    random.Random(7).shuffle(texts)
    for i, text in enumerate(texts):
        mem.propose(text if text not in DISTRACTORS else f"{text} ({i})", kind="fact")
    found = 0
    for memory, question in PARAPHRASES:
        top = [h.version.content for h in mem.search(question, k=5, mode="vector")]
        found += memory in top
    return found


def test_the_model_embedder_finds_paraphrases_the_hashing_one_cannot() -> None:
    model, hashing = _recall(ModelEmbedder()), _recall(HashingEmbedder())
    assert model >= 8, f"model recall@5 {model}/10"
    assert model > hashing, (model, hashing)


def test_the_model_loads_from_its_wheel_without_the_network(
        fresh_model: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: Any, **kw: Any) -> Any:
        raise AssertionError("the memory model tried to reach the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    embedder = ModelEmbedder()
    one, two = embedder.embed(["Allergic to peanuts", "Allergic to peanuts"])
    assert len(one) == embedder.dims == 256 and one == two
    assert abs(sum(x * x for x in one) - 1.0) < 1e-4  # normalised
    assert embedder.embed([]) == []


def test_the_environment_chooses_the_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(Env.MEMORY_EMBEDDER, raising=False)
    assert isinstance(default_embedder(), HashingEmbedder)
    monkeypatch.setenv(Env.MEMORY_EMBEDDER, "model")
    assert isinstance(default_embedder(), ModelEmbedder)
    assert Settings.from_env().memory_embedder == "model"
    client = MemoryClient(InMemoryBackend("default"),
                          Actor(Role.AGENT, "a", tenant="default", user="ada"))
    assert isinstance(client.embedder, ModelEmbedder)


def test_an_unknown_embedder_names_the_setting_and_the_choices(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(Env.MEMORY_EMBEDDER, "bert")
    with pytest.raises(SettingsError, match=r"SESSIONSTREAM_MEMORY_EMBEDDER='bert'.*hashing or "
                                            r"model"):
        Settings.from_env()
    with pytest.raises(Exception, match="hashing or model"):
        embedder_for("bert")


def test_a_missing_extra_says_how_to_install_it(
        fresh_model: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wordllama", None)  # import fails as if not installed
    with pytest.raises(ModelUnavailable, match=r"pip install 'sessionstream\[memory-model\]'"):
        ModelEmbedder()
