"""A local tokenizer folder for the simulated engine to report as its model_path.

The real sglang-router loads a tokenizer named by a worker's model_path and goes to the Hugging
Face hub when that is not a local folder (HF_HUB_OFFLINE does not stop it). A tiny WordLevel
tokenizer.json in a local folder keeps every test and benchmark off the network.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from repro.sim.vocabulary import WORDS

FORMAT = 1  # bump when the files below change, so old folders are not reused


def tokenizer_dir() -> Path:
    folder = Path(tempfile.gettempdir()) / f"repro-sim-tokenizer-v{FORMAT}-{os.getuid()}"
    if (folder / "tokenizer.json").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {"[UNK]": 0, **{word: i + 1 for i, word in enumerate(sorted(set(WORDS)))}}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}],
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
    }
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 32768,
              "chat_template": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"}
    # Write-then-rename: two engines starting at once never read half a file.
    for name, content in (("tokenizer_config.json", config), ("tokenizer.json", tokenizer)):
        tmp = folder / f".{name}.{os.getpid()}"
        tmp.write_text(json.dumps(content))
        tmp.replace(folder / name)
    return folder
