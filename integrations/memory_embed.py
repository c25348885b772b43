"""Long-term memory's embedders, chosen once (the setting ``Env.MEMORY_EMBEDDER``).

- ``hashing`` (the default): the core's :class:`HashingEmbedder`, deterministic and
  dependency-free. It matches words and spellings, not meanings: "which city is home"
  does not find "Lives in Lyon" by its vector (BM25 may, by a shared word).
- ``model``: :class:`ModelEmbedder`, WordLlama's 256-dimension static model (token
  embeddings distilled from large language models, averaged per text), shipped inside the
  ``wordllama`` wheel (16 MB): ``pip install 'sessionstream[memory-model]'``. Nothing is
  downloaded at run time; loading reads the wheel's files only, and a missing file is an
  error, never a download. About 10 µs a text on one core.

Vectors live only in a reader's process (docs/adr/0030, A4): a changed embedder changes
no stored byte, only the next index a reader builds.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sessionstream.core.errors import SessionStreamError
from sessionstream.core.memory.search import Embedder, HashingEmbedder
from sessionstream.core.settings import EMBEDDERS, Env, SettingsError, memory_embedder_from_env

__all__ = ["ModelEmbedder", "ModelUnavailable", "default_embedder", "embedder_for"]

#: The wheel's model: its files, relative to the ``wordllama`` package.
_WEIGHTS = ("weights", "l2_supercat_256.safetensors")
_TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")
_INSTALL = "pip install 'sessionstream[memory-model]'"


class ModelUnavailable(SettingsError):
    """The ``model`` embedder was asked for and its extra is not installed (or broken)."""


class ModelEmbedder:
    """The static model of the ``memory-model`` extra; loaded once per process."""

    _lock = threading.Lock()
    _loaded: Any = None

    def __init__(self) -> None:
        self._model = self._load()

    @property
    def name(self) -> str:
        return "wordllama-l2-supercat-256"

    @property
    def dims(self) -> int:
        return 256

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = self._model.embed(list(texts), norm=True)
        out: list[list[float]] = vectors.tolist()
        return out

    @classmethod
    def _load(cls) -> Any:
        with cls._lock:
            if cls._loaded is None:
                cls._loaded = _read_model()
            return cls._loaded


def _read_model() -> Any:
    try:
        import wordllama
        from safetensors import safe_open
        from tokenizers import Tokenizer
        from wordllama.inference import WordLlamaInference
    except ImportError as e:
        raise ModelUnavailable(
            f"{Env.MEMORY_EMBEDDER}=model needs the memory-model extra ({e.name} is not "
            f"installed): {_INSTALL}, or unset it for the hashing embedder") from None
    root = Path(wordllama.__file__).parent
    weights, tokenizer = root.joinpath(*_WEIGHTS), root.joinpath(*_TOKENIZER)
    for path in (weights, tokenizer):
        if not path.is_file():
            raise ModelUnavailable(
                f"the memory model's file {path.name} is not in the installed wordllama "
                f"package; reinstall it: {_INSTALL}")
    with safe_open(str(weights), framework="np") as f:
        matrix = f.get_tensor("embedding.weight")
    return WordLlamaInference(matrix, Tokenizer.from_file(str(tokenizer)))


def embedder_for(name: str) -> Embedder:
    """The embedder called ``name`` (one of :data:`EMBEDDERS`)."""
    if name == "hashing":
        return HashingEmbedder()
    if name == "model":
        return ModelEmbedder()
    raise SessionStreamError(f"{Env.MEMORY_EMBEDDER}={name!r} is not an embedder: use "
                             + " or ".join(EMBEDDERS))


def default_embedder() -> Embedder:
    """The embedder this process is configured with (``hashing`` unless the environment
    names another)."""
    return embedder_for(memory_embedder_from_env())
