"""A tiny random causal LM with a ChatML byte-level tokenizer, built in milliseconds with no download.

It exists so that tests, CI and smoke runs exercise the real generation, trajectory and training code
(real tokenizer, real KV cache, real backward pass) without a 135M-parameter model. Its tokenizer is a
byte-level BPE trained on a few lines of chat text, so it encodes any string, and it has the ChatML
special tokens at the same ids as SmolLM2 (``<|im_start|>`` = 1, ``<|im_end|>`` = 2, which is also pad).
"""

from __future__ import annotations

from typing import Any

_CORPUS = [
    '<tool_call>\n{"name": "lookup", "arguments": {"key": "value"}}\n</tool_call>',
    "<tool_response>\n{\"status\": \"ok\"}\n</tool_response>",
    "Hello! How can I help you today? I would like to book an appointment with the doctor.",
    "system user assistant tool # Tools You may call functions. Thank you, goodbye.",
]


def tiny_tokenizer(vocab_size: int = 384) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_CORPUS * 4, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )


TINY_LAYERS = 2  # decoder blocks of the tiny model


def tiny_random_lm(seed: int = 0, hidden_size: int = 64, layers: int = TINY_LAYERS) -> tuple[Any, Any]:
    """(LlamaForCausalLM with random weights in float32, its tokenizer); same seed, same weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        bos_token_id=1, eos_token_id=2, pad_token_id=2, tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):  # seed the init without touching the caller's RNG
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
    return model, tokenizer
