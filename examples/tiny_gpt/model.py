"""A tiny decoder-only transformer over bytes, with a KV cache and iteration-level batching.

- Vocabulary: the 256 byte values, ``BOS`` (256) and ``EOS`` (257). A prompt is ``[BOS] + its UTF-8 bytes``.
- 2 pre-LayerNorm layers, d_model 64, 4 heads, learned position embeddings, a context of 512 tokens
  (``1 + len(prompt) + max_new_tokens <= 512``, else ``ValueError``), an untied output head (a head tied
  to the embedding makes a random model repeat its last byte forever).
- Weights come from a seed (:func:`build_state_dict`); nothing is downloaded or trained.
- Everything is computed in float64, so padding a request into a batch (different rounding) cannot flip
  a greedy argmax: batched decoding chooses exactly the tokens single-request decoding chooses.
- Greedy decoding over printable ASCII (32..126) and ``EOS`` only (the other logits are masked), so every
  generated token is exactly one ASCII character, or ``EOS``, which streams as an empty string.

A request is a :class:`Generation` (its prompt, budget, KV cache and tokens so far). :func:`step` gives
every generation in a batch its next token: the new ones (no token yet) are prefilled together (right
padding, causal + padding mask), the running ones decode together (each attends to its own cache length).
"""

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.nn import functional

BOS = 256
EOS = 257
VOCAB = 258
LAYERS = 2
D_MODEL = 64
HEADS = 4
HEAD_DIM = D_MODEL // HEADS
MLP_DIM = 4 * D_MODEL
MAX_CONTEXT = 512
DTYPE = torch.float64
DEFAULT_SEED = 0
FIRST_PRINTABLE = 32
LAST_PRINTABLE = 126

# The tokens greedy decoding may choose: printable ASCII and EOS.
ALLOWED = torch.zeros(VOCAB, dtype=torch.bool)
ALLOWED[FIRST_PRINTABLE : LAST_PRINTABLE + 1] = True
ALLOWED[EOS] = True


def _shapes() -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {"tok_emb": (VOCAB, D_MODEL), "pos_emb": (MAX_CONTEXT, D_MODEL)}
    for layer in range(LAYERS):
        p = f"layers.{layer}."
        shapes |= {
            p + "ln1.weight": (D_MODEL,),
            p + "ln1.bias": (D_MODEL,),
            p + "qkv.weight": (3 * D_MODEL, D_MODEL),
            p + "qkv.bias": (3 * D_MODEL,),
            p + "out.weight": (D_MODEL, D_MODEL),
            p + "out.bias": (D_MODEL,),
            p + "ln2.weight": (D_MODEL,),
            p + "ln2.bias": (D_MODEL,),
            p + "fc.weight": (MLP_DIM, D_MODEL),
            p + "fc.bias": (MLP_DIM,),
            p + "proj.weight": (D_MODEL, MLP_DIM),
            p + "proj.bias": (D_MODEL,),
        }
    return shapes | {"ln_f.weight": (D_MODEL,), "ln_f.bias": (D_MODEL,), "head.weight": (VOCAB, D_MODEL)}


STATE_SHAPES = _shapes()


def build_state_dict(seed: int = DEFAULT_SEED) -> dict[str, Tensor]:
    """The model's weights, drawn from a generator seeded with ``manual_seed(seed)`` (the global RNG is
    left alone): the same seed gives bit-identical weights on every machine."""
    generator = torch.Generator().manual_seed(seed)
    state: dict[str, Tensor] = {}
    for name, shape in STATE_SHAPES.items():
        if name.endswith(".bias"):
            state[name] = torch.zeros(shape, dtype=DTYPE)
        elif name.endswith(".weight") and name.split(".")[-2].startswith("ln"):
            state[name] = torch.ones(shape, dtype=DTYPE)  # LayerNorm gains
        else:
            std = 1.0 if name in ("tok_emb", "pos_emb", "head.weight") else 1.0 / math.sqrt(shape[1])
            state[name] = torch.randn(shape, generator=generator, dtype=DTYPE) * std
    return state


@dataclass
class KVCache:
    """One request's keys and values: ``[LAYERS, HEADS, capacity, HEAD_DIM]``; ``length`` positions are
    filled."""

    keys: Tensor
    values: Tensor
    length: int = 0

    @classmethod
    def allocate(cls, capacity: int) -> "KVCache":
        shape = (LAYERS, HEADS, capacity, HEAD_DIM)
        return cls(torch.zeros(shape, dtype=DTYPE), torch.zeros(shape, dtype=DTYPE))

    @property
    def capacity(self) -> int:
        return int(self.keys.shape[2])


def encode_prompt(prompt: str | bytes) -> list[int]:
    """``[BOS]`` followed by the prompt's bytes (a str is encoded as UTF-8)."""
    data = prompt.encode("utf-8") if isinstance(prompt, str) else bytes(prompt)
    return [BOS, *data]


def token_text(token: int) -> str:
    """What a generated token streams as: its ASCII character, or ``""`` for EOS."""
    if token == EOS:
        return ""
    if not FIRST_PRINTABLE <= token <= LAST_PRINTABLE:
        raise ValueError(f"token {token} is not a generated token")
    return chr(token)


def check_request(prompt: str | bytes, max_new_tokens: int) -> list[int]:
    """The prompt's tokens, or ``ValueError`` saying what is wrong with the request."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise ValueError(f"max_new_tokens must be an integer, got {max_new_tokens!r}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    tokens = encode_prompt(prompt)
    if len(tokens) == 1:
        raise ValueError("the prompt is empty")
    if len(tokens) + max_new_tokens > MAX_CONTEXT:
        raise ValueError(
            f"prompt ({len(tokens) - 1} bytes) + max_new_tokens ({max_new_tokens}) is too long: "
            f"BOS + prompt + generated tokens must fit the context of {MAX_CONTEXT} tokens"
        )
    return tokens


@dataclass
class Generation:
    """One request's state between iterations."""

    prompt: list[int]
    max_new_tokens: int
    cache: KVCache
    tokens: list[int] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return len(self.tokens) >= self.max_new_tokens or (bool(self.tokens) and self.tokens[-1] == EOS)

    @property
    def texts(self) -> list[str]:
        """The tokens generated so far, as streamed."""
        return [token_text(token) for token in self.tokens]


def start(prompt: str | bytes, max_new_tokens: int) -> Generation:
    """A new generation (``ValueError`` for an empty or too long prompt or a bad ``max_new_tokens``)."""
    tokens = check_request(prompt, max_new_tokens)
    # The last generated token is never fed back: the cache holds the prompt and all but one token.
    return Generation(tokens, max_new_tokens, KVCache.allocate(len(tokens) + max_new_tokens - 1))


def greedy(logits: Tensor) -> list[int]:
    """The highest allowed logit of each row of ``[batch, VOCAB]`` logits."""
    return [int(token) for token in logits.masked_fill(~ALLOWED, -math.inf).argmax(dim=-1)]


class TinyGPT:
    """The transformer, written out functionally over its state dict (no ``torch.nn.Module``, so building
    it draws nothing from the global RNG)."""

    def __init__(self, state_dict: Mapping[str, Tensor]) -> None:
        missing = STATE_SHAPES.keys() - state_dict.keys()
        unexpected = state_dict.keys() - STATE_SHAPES.keys()
        if missing or unexpected:
            raise ValueError(
                f"bad tiny_gpt state dict: missing {sorted(missing)}, unexpected {sorted(unexpected)}"
            )
        self.weights: dict[str, Tensor] = {}
        for name, shape in STATE_SHAPES.items():
            tensor = state_dict[name]
            if tuple(tensor.shape) != shape:
                raise ValueError(
                    f"bad tiny_gpt state dict: {name} has shape {tuple(tensor.shape)}, not {shape}"
                )
            self.weights[name] = tensor.detach().to(device="cpu", dtype=DTYPE)

    @classmethod
    def from_seed(cls, seed: int = DEFAULT_SEED) -> "TinyGPT":
        return cls(build_state_dict(seed))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "TinyGPT":
        """The model from a state dict saved with ``torch.save`` (read with ``weights_only=True``)."""
        return cls(torch.load(path, map_location="cpu", weights_only=True))

    # The two batched passes -----------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, prompts: Sequence[Sequence[int]], caches: Sequence[KVCache]) -> Tensor:
        """Run whole prompts (different lengths, right-padded), fill each cache from position 0, and
        return the logits ``[batch, VOCAB]`` at each prompt's last token."""
        lengths = [len(prompt) for prompt in prompts]
        if not prompts or min(lengths) < 1 or len(caches) != len(prompts):
            raise ValueError("prefill needs one non-empty prompt per cache")
        width = max(lengths)
        ids = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, : len(prompt)] = torch.tensor(prompt, dtype=torch.long)
        w = self.weights
        x = w["tok_emb"][ids] + w["pos_emb"][:width]
        valid = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]  # [batch, key]
        causal = torch.ones((width, width), dtype=torch.bool).tril()
        mask = causal[None, None, :, :] & valid[:, None, None, :]  # [batch, 1, query, key]
        for layer in range(LAYERS):
            p = f"layers.{layer}."
            q, k, v = self._qkv(x, p)
            for row, (cache, length) in enumerate(zip(caches, lengths, strict=True)):
                cache.keys[layer, :, :length] = k[row, :, :length]
                cache.values[layer, :, :length] = v[row, :, :length]
            x = self._finish_layer(x, self._attend(q, k, v, mask), p)
        for cache, length in zip(caches, lengths, strict=True):
            cache.length = length
        last = x[torch.arange(len(prompts)), torch.tensor(lengths) - 1]
        return self._logits(last)

    @torch.inference_mode()
    def decode(self, tokens: Sequence[int], caches: Sequence[KVCache]) -> Tensor:
        """Feed one token per request at its cache's next position, append its keys and values, and
        return the logits ``[batch, VOCAB]`` for the following token."""
        if not tokens or len(tokens) != len(caches):
            raise ValueError("decode needs one token per cache")
        positions = [cache.length for cache in caches]
        for cache in caches:
            if cache.length >= cache.capacity:
                raise ValueError("the KV cache is full")
        batch, span = len(caches), max(positions) + 1
        w = self.weights
        x = w["tok_emb"][torch.tensor(tokens)] + w["pos_emb"][torch.tensor(positions)]
        x = x[:, None, :]  # [batch, 1, D]
        mask = (torch.arange(span)[None, :] <= torch.tensor(positions)[:, None])[:, None, None, :]
        for layer in range(LAYERS):
            p = f"layers.{layer}."
            q, k, v = self._qkv(x, p)
            keys = torch.zeros((batch, HEADS, span, HEAD_DIM), dtype=DTYPE)
            values = torch.zeros_like(keys)
            for row, (cache, position) in enumerate(zip(caches, positions, strict=True)):
                cache.keys[layer, :, position] = k[row, :, 0]
                cache.values[layer, :, position] = v[row, :, 0]
                keys[row, :, : position + 1] = cache.keys[layer, :, : position + 1]
                values[row, :, : position + 1] = cache.values[layer, :, : position + 1]
            x = self._finish_layer(x, self._attend(q, keys, values, mask), p)
        for cache in caches:
            cache.length += 1
        return self._logits(x[:, 0])

    def logits(self, tokens: Sequence[int]) -> Tensor:
        """The next-token logits ``[VOCAB]`` after ``tokens``, recomputed from scratch (no cache kept)."""
        return self.prefill([tokens], [KVCache.allocate(len(tokens))])[0]

    # Pieces ---------------------------------------------------------------------------------------
    def _qkv(self, x: Tensor, p: str) -> tuple[Tensor, Tensor, Tensor]:
        w = self.weights
        h = functional.layer_norm(x, (D_MODEL,), w[p + "ln1.weight"], w[p + "ln1.bias"])
        qkv = functional.linear(h, w[p + "qkv.weight"], w[p + "qkv.bias"])
        batch, width = x.shape[0], x.shape[1]
        q, k, v = qkv.view(batch, width, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)  # 3 x [B, H, T, hd]
        return q, k, v

    @staticmethod
    def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(HEAD_DIM)
        weights = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1)
        out = weights @ v  # [B, H, T, hd]
        return out.transpose(1, 2).reshape(q.shape[0], q.shape[2], D_MODEL)

    def _finish_layer(self, x: Tensor, attended: Tensor, p: str) -> Tensor:
        w = self.weights
        x = x + functional.linear(attended, w[p + "out.weight"], w[p + "out.bias"])
        h = functional.layer_norm(x, (D_MODEL,), w[p + "ln2.weight"], w[p + "ln2.bias"])
        h = functional.gelu(functional.linear(h, w[p + "fc.weight"], w[p + "fc.bias"]))
        return x + functional.linear(h, w[p + "proj.weight"], w[p + "proj.bias"])

    def _logits(self, x: Tensor) -> Tensor:
        w = self.weights
        h = functional.layer_norm(x, (D_MODEL,), w["ln_f.weight"], w["ln_f.bias"])
        return functional.linear(h, w["head.weight"])


def step(model: TinyGPT, generations: Sequence[Generation]) -> list[int]:
    """One iteration: the next token of every generation (appended to it), in order. Generations with no
    token yet are prefilled as one batch; the others decode as one batch."""
    if any(generation.done for generation in generations):
        raise ValueError("a finished generation cannot take another step")
    new = [g for g in generations if not g.tokens]
    running = [g for g in generations if g.tokens]
    if new:
        logits = model.prefill([g.prompt for g in new], [g.cache for g in new])
        for generation, token in zip(new, greedy(logits), strict=True):
            generation.tokens.append(token)
    if running:
        logits = model.decode([g.tokens[-1] for g in running], [g.cache for g in running])
        for generation, token in zip(running, greedy(logits), strict=True):
            generation.tokens.append(token)
    return [generation.tokens[-1] for generation in generations]
