"""Tiny random fairseq models, dictionaries and batches for the tests (no training needed)."""
import argparse
from contextlib import contextmanager
from types import SimpleNamespace

import numba
import torch
from fairseq.data import Dictionary, LanguagePairDataset, indexed_dataset
from fairseq.models.transformer import TransformerModel, base_architecture

from pardec_fairseq.models.blockwise_transformer import BlockwiseTransformerModel, blockwise_architecture


def make_dictionary(n_symbols):
    dictionary = Dictionary()
    for i in range(n_symbols):
        dictionary.add_symbol(f"w{i}")
    return dictionary


def write_split(prefix, sentences, eos=2):
    """A binarized split as fairseq-preprocess writes one (``PREFIX.bin``/``.idx``): each sentence, a list
    of token ids, ends with ``eos`` (a ``make_dictionary``'s)."""
    builder = indexed_dataset.make_builder(f"{prefix}.bin", impl="mmap", vocab_size=20)
    for sentence in sentences:
        builder.add_item(torch.tensor(sentence + [eos], dtype=torch.int32))
    builder.finalize(f"{prefix}.idx")


def build_transformer(dictionary, seed=0, layers=1, embed_dim=16, heads=2, ffn_dim=32,
                      max_positions=64, eos_bias=0.0, learned_positions=False, block_heads=None,
                      identity_first_head=False, **architecture):
    """A stock fairseq ``transformer`` with random weights; ``eos_bias`` shifts how soon it stops.
    With ``block_heads``, a ``blockwise_transformer`` with that many heads. ``architecture``: more
    fairseq model arguments (``decoder_normalize_before=True``, ``activation_fn="gelu"``, ...)."""
    args = argparse.Namespace(**{
        **dict(encoder_layers=layers, decoder_layers=layers,
               encoder_embed_dim=embed_dim, decoder_embed_dim=embed_dim,
               encoder_attention_heads=heads, decoder_attention_heads=heads,
               encoder_ffn_embed_dim=ffn_dim, decoder_ffn_embed_dim=ffn_dim,
               max_source_positions=max_positions, max_target_positions=max_positions,
               dropout=0.0, share_all_embeddings=True,
               encoder_learned_pos=learned_positions, decoder_learned_pos=learned_positions),
        **architecture})
    model_class = TransformerModel
    if block_heads is not None:
        args.block_heads, args.identity_first_head, model_class = block_heads, identity_first_head, BlockwiseTransformerModel
        blockwise_architecture(args)
    base_architecture(args)
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    torch.manual_seed(seed)
    model = model_class.build_model(args, task)
    # an output bias on EOS alone (weights still tied) varies the output lengths of random models
    projection = torch.nn.Linear(model.decoder.output_projection.in_features, len(dictionary), bias=True)
    projection.weight = model.decoder.output_projection.weight
    with torch.no_grad():
        projection.bias.zero_()
        projection.bias[dictionary.eos()] = eos_bias
    model.decoder.output_projection = projection
    return model.eval()


def make_batch(dictionary, sentences, left_pad_source=True, targets=None):
    """Collate lists of word indices (without EOS) into a fairseq translation batch (with ``targets``,
    lists of word indices too, their target side)."""
    eos = dictionary.eos()
    tensors = [torch.tensor(list(s) + [eos]) for s in sentences]
    target_tensors = None if targets is None else [torch.tensor(list(t) + [eos]) for t in targets]
    dataset = LanguagePairDataset(tensors, [len(t) for t in tensors], dictionary, target_tensors,
                                  None if targets is None else [len(t) for t in target_tensors], dictionary,
                                  left_pad_source=left_pad_source)
    return dataset.collater([dataset[i] for i in range(len(tensors))])


@contextmanager
def torch_on_threads(threads: int):
    """Torch on ``threads`` threads and numba on all of its own (which decoding must narrow to torch's),
    both restored afterwards."""
    saved = torch.get_num_threads(), numba.get_num_threads()
    torch.set_num_threads(threads)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(saved[0])
        numba.set_num_threads(saved[1])
