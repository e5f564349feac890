"""Exponential backoff with full jitter, for the gateway's reconnect loops."""

import random


class Backoff:
    def __init__(self, base_s: float = 0.05, cap_s: float = 2.0) -> None:
        self._base_s = base_s
        self._cap_s = cap_s
        self._attempt = 0

    def next_s(self) -> float:
        ceiling = min(self._cap_s, self._base_s * 2**self._attempt)
        self._attempt = min(self._attempt + 1, 30)
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self._attempt = 0
