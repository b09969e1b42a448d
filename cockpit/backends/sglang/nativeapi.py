"""SGLang's own streaming generate endpoint, `/generate` (`cockpit bench --api sglang`).

The request: `{"text" | "input_ids", "sampling_params": {"max_new_tokens", "ignore_eos",
"temperature"}, "stream": true}`; each streamed event (and a whole answer) carries
`meta_info.completion_tokens`, the output tokens so far.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class SGLangGenerate:
    path = "/generate"

    def body(self, text: str | None, token_ids: list[int] | None, output_len: int) -> dict[str, Any]:
        body: dict[str, Any] = {"stream": True, "sampling_params": {
            "max_new_tokens": output_len, "ignore_eos": True, "temperature": 0.0}}
        if token_ids is not None:
            body["input_ids"] = token_ids
        else:
            body["text"] = text
        return body

    def output_tokens(self, event: Mapping[str, Any]) -> Any:
        meta = event.get("meta_info")
        return meta.get("completion_tokens") if isinstance(meta, dict) else None
