"""The router's tokenizer and the model's config, loaded as SGLang's servers load them.

SGLang's servers load their tokenizer with ``transformers.AutoTokenizer``; the router must use
the same class so that its prompts and text equal a plain server's. ``AutoTokenizer`` reads the
model's config through ``AutoConfig``, which imports torch (about 4 of a router's 6 seconds of
start-up, on every router of a deployment and of the test suite); so does ``AutoConfig``,
which a local ``config.json`` does not need. A checkpoint whose
``tokenizer_config.json`` names the plain fast backend, ``TokenizersBackend``, with no remote
code, and whose model type transformers registers no tokenizer class of its own for, resolves
to that backend in ``AutoTokenizer``: the router loads it directly then, without torch. Every
other checkpoint goes through ``AutoTokenizer``. ``tests/router/test_model_files.py`` checks the
model types named here against the installed transformers, and the class and the encodings
against ``AutoTokenizer``'s.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

logger = logging.getLogger(__name__)

# Model types whose checkpoints transformers (5.x) gives no tokenizer class of its own: with
# ``"tokenizer_class": "TokenizersBackend"`` AutoTokenizer returns that backend for them.
# (Checked against transformers' registry by tests/router/test_model_files.py.)
PLAIN_BACKEND_MODEL_TYPES = frozenset({"llama"})


def _local_json(directory: Path, name: str) -> dict | None:
    path = directory / name
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def plain_backend_applies(path: str) -> bool:
    """True if ``AutoTokenizer.from_pretrained(path)`` would return ``TokenizersBackend``, as
    far as the local files under ``path`` tell (False for anything not local)."""
    directory = Path(path)
    if not directory.is_dir():
        return False
    tokenizer_config = _local_json(directory, "tokenizer_config.json")
    model_config = _local_json(directory, "config.json")
    if tokenizer_config is None or model_config is None:
        return False
    return (
        tokenizer_config.get("tokenizer_class") == "TokenizersBackend"
        and "auto_map" not in tokenizer_config
        and "auto_map" not in model_config
        and model_config.get("model_type") in PLAIN_BACKEND_MODEL_TYPES
    )


def load_tokenizer(path: str):
    """The tokenizer SGLang's servers load from ``path`` (see the module's docstring)."""
    if plain_backend_applies(path):
        from transformers.tokenization_utils_tokenizers import TokenizersBackend

        return TokenizersBackend.from_pretrained(path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def model_config(model_path: str) -> dict:
    """The model's config as a dict: a local ``config.json`` as it is, anything else through
    ``AutoConfig`` (which may fetch it). Keys transformers fills in by default may be absent
    from a local file: readers fall back as transformers would."""
    local = _local_json(Path(model_path), "config.json")
    if local is not None:
        return local
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model_path).to_dict()


def model_vocab_size(model_path: str | None, tokenizer) -> int:
    """The model's embedding rows (its config's ``vocab_size``, or its text model's), else
    the tokenizer's size."""
    size = None
    try:
        if model_path:
            config = model_config(model_path)
            size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    except (OSError, ValueError, TypeError) as exc:
        logger.info(
            "sglang-pdd router: no model config at %s (%s); the tokenizer's size bounds input ids",
            model_path,
            exc,
        )
    return int(size) if size else len(tokenizer)
