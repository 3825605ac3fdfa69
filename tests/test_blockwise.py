"""The blockwise-head Transformer (Stern et al. 2018) and its loss: head 1 is an ordinary
Transformer output, each head i is trained on the targets i - 1 positions ahead, and fairseq-train
trains it from the command line, distributed included."""
import argparse
import json
import re
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from fairseq import checkpoint_utils
from fairseq.data import Dictionary
from fairseq.sequence_generator import SequenceGenerator

from conftest import TINY_TRANSFORMER, USER_DIR, run_fairseq
from pardec_fairseq.cli import analyze_heads
from pardec_fairseq.decoding import build_generator, vector_kernels
from pardec_fairseq.decoding.drafters.blockwise import BlockwiseHeadsDrafter
from pardec_fairseq.decoding.drafters.refinement import LatticeRescoring
from pardec_fairseq.decoding.fast_ops import Product
from pardec_fairseq.criterions.blockwise_cross_entropy import (BlockwiseCrossEntropyCriterion,
                                                               parse_head_weights, shifted_targets)
from pardec_fairseq.models.blockwise_transformer import BlockwiseTransformerModel, blockwise_architecture
from test_lossless_matches_fairseq import (GENERATION_DEFAULTS, assert_same_hypotheses, fairseq_beam_one, model_for,
                                          plugin, sentences)
from test_scripts import free_port, run_script
from tiny import build_transformer, make_batch, make_dictionary

TOY_SIZES = dict(encoder_layers=1, decoder_layers=1, encoder_embed_dim=32, decoder_embed_dim=32,
                 encoder_ffn_embed_dim=64, decoder_ffn_embed_dim=64, encoder_attention_heads=2,
                 decoder_attention_heads=2, share_all_embeddings=True)
BLOCKWISE = ["--arch", "blockwise_transformer", *TINY_TRANSFORMER[2:]]


def build_blockwise(dictionary, seed=0, **options):
    args = argparse.Namespace(**TOY_SIZES, **options)
    blockwise_architecture(args)
    torch.manual_seed(seed)
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    return BlockwiseTransformerModel.build_model(args, task).eval()


def toy_dictionary(toy_experiment):
    return Dictionary.load(str(toy_experiment["data"] / "dict.src.txt"))


def hypotheses(fairseq_generate_output):
    return sorted(re.findall(r"^H-(\d+)\t\S+\t(.*)$", fairseq_generate_output, flags=re.M))


def greedy(model, dictionary, batch):
    hypos = SequenceGenerator([model], dictionary, beam_size=1, max_len_b=30).generate([model], batch)
    return [h[0]["tokens"].tolist() for h in hypos]


def test_identity_first_head_initialised_from_a_transformer_decodes_like_it(toy_experiment):
    dictionary = toy_dictionary(toy_experiment)
    base = checkpoint_utils.load_model_ensemble([str(toy_experiment["checkpoint"])])[0][0].eval()
    model = build_blockwise(dictionary, block_heads=3, identity_first_head=True,
                            init_base_from=str(toy_experiment["checkpoint"]))
    batch = make_batch(dictionary, [[4, 9, 12, 7], [15, 6], [20, 21, 22, 23, 24, 25, 26]])
    assert greedy(model, dictionary, batch) == greedy(base, dictionary, batch)
    mismatched = dict(block_heads=3, identity_first_head=True, init_base_from=str(toy_experiment["checkpoint"]))
    with pytest.raises(ValueError, match="not a transformer of this shape"):
        args = argparse.Namespace(**{**TOY_SIZES, "decoder_ffn_embed_dim": 48}, **mismatched)
        blockwise_architecture(args)
        BlockwiseTransformerModel.build_model(args, SimpleNamespace(source_dictionary=dictionary,
                                                                   target_dictionary=dictionary))


def test_head_one_alone_equals_head_one_among_all(toy_experiment):
    dictionary = toy_dictionary(toy_experiment)
    model = build_blockwise(dictionary, block_heads=4)
    features = torch.randn(2, 5, 32)
    all_heads = model.decoder.head_logits(features)
    assert len(all_heads) == 4
    torch.testing.assert_close(model.decoder.output_layer(features), all_heads[0])
    assert not torch.allclose(all_heads[1], all_heads[0])  # a learned head, not a copy
    picked = model.decoder.head_logits(features, [2])
    torch.testing.assert_close(picked[0], all_heads[2])


def test_freeze_base_trains_only_the_heads(toy_experiment):
    dictionary = toy_dictionary(toy_experiment)
    model = build_blockwise(dictionary, block_heads=2, freeze_base=True)
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trained == {"decoder.blockwise_heads.fc1.weight", "decoder.blockwise_heads.fc1.bias",
                       "decoder.blockwise_heads.fc2.weight", "decoder.blockwise_heads.fc2.bias"}


def test_a_frozen_base_trains_without_dropout_and_its_heads_with_it(toy_experiment):
    """In training mode a frozen base computes what it computes when decoding; the heads keep dropout."""
    dictionary = toy_dictionary(toy_experiment)
    batch = make_batch(dictionary, [[4, 5, 6, 7], [8, 9]])
    net_input = {**batch["net_input"], "prev_output_tokens": torch.tensor([[2, 10, 11, 12], [2, 13, 1, 1]])}
    frozen = build_blockwise(dictionary, block_heads=3, freeze_base=True, dropout=0.5)
    decoding = frozen(**net_input, features_only=True)[0]
    frozen.train()
    features = [frozen(**net_input, features_only=True)[0] for _ in range(2)]
    torch.testing.assert_close(features[0], decoding)
    torch.testing.assert_close(features[1], decoding)
    heads = [frozen.decoder.head_logits(decoding, [1])[0] for _ in range(2)]
    assert not torch.allclose(heads[0], heads[1])
    assert not frozen.train(False).decoder.blockwise_heads.training
    trained = build_blockwise(dictionary, block_heads=3, dropout=0.5).train()
    assert not torch.allclose(trained(**net_input, features_only=True)[0], trained(**net_input, features_only=True)[0])


def test_targets_shift_left_by_the_head_index():
    pad = 1
    target = torch.tensor([[10, 11, 12, 2], [20, 2, pad, pad]])
    assert shifted_targets(target, 0, pad).tolist() == target.tolist()
    assert shifted_targets(target, 1, pad).tolist() == [[11, 12, 2, pad], [2, pad, pad, pad]]
    assert shifted_targets(target, 3, pad).tolist() == [[2, pad, pad, pad], [pad, pad, pad, pad]]
    assert shifted_targets(target, 6, pad).tolist() == [[pad] * 4, [pad] * 4]


def test_head_weights_are_checked():
    assert parse_head_weights(None, 3) == [1.0, 1.0, 1.0]
    assert parse_head_weights("1,0.5,0", 3) == [1.0, 0.5, 0.0]
    with pytest.raises(ValueError, match="needs 3 non-negative weights"):
        parse_head_weights("1,1", 3)


def test_loss_is_the_weighted_sum_of_shifted_head_losses(toy_experiment):
    dictionary = toy_dictionary(toy_experiment)
    model = build_blockwise(dictionary, block_heads=3)
    batch = make_batch(dictionary, [[4, 5, 6, 7], [8, 9]])
    target = torch.tensor([[10, 11, 12, dictionary.eos()], [13, dictionary.eos(), 1, 1]])
    prev = torch.tensor([[dictionary.eos(), 10, 11, 12], [dictionary.eos(), 13, 1, 1]])
    sample = {"net_input": {**batch["net_input"], "prev_output_tokens": prev}, "target": target, "ntokens": 6}
    task = SimpleNamespace(target_dictionary=dictionary)
    criterion = BlockwiseCrossEntropyCriterion(task, head_weights="1,0.5,0.25")
    loss, sample_size, log = criterion(model, sample)
    logits = model.decoder.head_logits(model(**sample["net_input"], features_only=True)[0])
    expected = 0.0
    for head, weight in enumerate([1.0, 0.5, 0.25]):
        lprobs = torch.log_softmax(logits[head], -1)
        # by hand: head 2 at position 0 of row 0 predicts 11, head 3 predicts 12; row 1 has EOS then pads
        targets = {0: [[10, 11, 12, 2], [13, 2]], 1: [[11, 12, 2], [2]], 2: [[12, 2], []]}[head]
        for row, row_targets in enumerate(targets):
            for position, token in enumerate(row_targets):
                expected -= weight * lprobs[row, position, token].item()
    assert sample_size == 6
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert [log[f"count_{h}"] for h in (1, 2, 3)] == [6, 4, 2]


def test_random_head_trains_one_head_per_batch_and_skips_a_frozen_identity(toy_experiment):
    dictionary = toy_dictionary(toy_experiment)
    model = build_blockwise(dictionary, block_heads=3, identity_first_head=True, freeze_base=True)
    batch = make_batch(dictionary, [[4, 5, 6]])
    sample = {"net_input": {**batch["net_input"], "prev_output_tokens": torch.tensor([[2, 10, 11]])},
              "target": torch.tensor([[10, 11, 2]]), "ntokens": 3}
    criterion = BlockwiseCrossEntropyCriterion(SimpleNamespace(target_dictionary=dictionary), random_head=True)
    drawn = set()
    for seed in range(30):
        torch.manual_seed(seed)
        _, _, log = criterion(model, sample)
        drawn |= {h for h in (1, 2, 3) if log[f"count_{h}"] > 0}
        assert sum(log[f"count_{h}"] > 0 for h in (1, 2, 3)) == 1
    assert drawn == {2, 3}


def test_fairseq_train_trains_blockwise_heads_and_generates(toy_experiment, tmp_path):
    save = tmp_path / "checkpoints"
    output = run_fairseq("train", toy_experiment["data"], "--user-dir", USER_DIR, "--task", "translation_pardec",
                         *BLOCKWISE, "--block-heads", 4, "--criterion", "blockwise_cross_entropy",
                         "--label-smoothing", 0.1, "--max-update", 6, "--save-dir", save, "--log-interval", 1,
                         "--log-format", "simple")
    assert "acc_4" in output and "nll_3" in output and "done training" in output
    generated = run_fairseq("generate", toy_experiment["data"], "--user-dir", USER_DIR, "--task",
                            "translation_pardec", "--path", save / "checkpoint_last.pt", "--beam", 1,
                            "--batch-size", 8)
    assert len(hypotheses(generated)) == 100
    for batch_size in (1, 16):
        bpd = run_fairseq("generate", toy_experiment["data"], "--user-dir", USER_DIR, "--task", "translation_pardec",
                          "--path", save / "checkpoint_last.pt", "--gen-algo", "bpd", "--batch-size", batch_size,
                          "--pardec-stats", tmp_path / "stats.json")
        assert hypotheses(bpd) == hypotheses(generated)
        assert json.loads((tmp_path / "stats.json").read_text())["sentences"] == 100
    # the heads' analysis: its top-1 oracle is what bpd did, sentence for sentence
    analysis = tmp_path / "analysis"
    analyze_heads.main([str(toy_experiment["data"]), "--path", str(save / "checkpoint_last.pt"), "-s", "src", "-t",
                        "tgt", "--top-k", "1", "3", "--batch-size", "7", "--out-dir", str(analysis)])
    summary = json.loads((analysis / "heads.json").read_text())
    per_sentence = json.loads((tmp_path / "stats.json").read_text())["per_sentence"]
    bpd_iterations = {s["id"]: s["iterations"] for s in per_sentence}
    assert {int(i): n for i, n in summary["passes"]["1"].items()} == bpd_iterations
    assert summary["block_efficiency"]["3"] >= summary["block_efficiency"]["1"]
    assert "| 4 |" in (analysis / "heads.md").read_text() and (analysis / "heads.png").stat().st_size > 10_000
    base = tmp_path / "base.pt"
    shutil.copy(toy_experiment["checkpoint"], base)
    frozen = run_fairseq("train", toy_experiment["data"], "--user-dir", USER_DIR, "--task", "translation_pardec",
                         *BLOCKWISE, "--block-heads", 2, "--identity-first-head", "--freeze-base",
                         "--init-base-from", base, "--criterion", "blockwise_cross_entropy", "--random-head",
                         "--max-update", 3, "--save-dir", tmp_path / "frozen", "--log-format", "simple")
    assert "done training" in frozen
    base.unlink()  # the trained checkpoint does not need its base any more
    # translation_pardec runs fairseq's own search here and, unlike translation, keeps the remainder batch
    generated = run_fairseq("generate", toy_experiment["data"], "--user-dir", USER_DIR, "--task",
                            "translation_pardec", "--path", tmp_path / "frozen" / "checkpoint_last.pt", "--beam", 1,
                            "--batch-size", 8)
    reference = run_fairseq("generate", toy_experiment["data"], "--user-dir", USER_DIR, "--task",
                            "translation_pardec", "--path", toy_experiment["checkpoint"], "--beam", 1,
                            "--batch-size", 8)
    assert len(hypotheses(reference)) == 100
    assert hypotheses(generated) == hypotheses(reference)  # identity head 1, frozen base: the base's output


def test_blockwise_training_with_two_local_processes(toy_experiment, tmp_path):
    output = run_script("train_distributed.sh", "--nproc", 2, "--backend", "gloo",
                        "--master", f"127.0.0.1:{free_port()}", "--log-dir", tmp_path / "logs", "--",
                        toy_experiment["data"], "--user-dir", USER_DIR, "--task", "translation_pardec",
                        *BLOCKWISE, "--block-heads", 3, "--criterion", "blockwise_cross_entropy",
                        "--random-head", "--max-update", 4, "--save-dir", tmp_path / "checkpoints")
    assert "distributed init (rank 1)" in (tmp_path / "logs" / "rank1.log").read_text()
    assert "done training" in output
    assert (tmp_path / "checkpoints" / "checkpoint_last.pt").exists()


def test_bpd_accepts_whole_blocks_the_heads_get_right():
    dictionary = make_dictionary(20)
    # a model that says w3 until the length limit, with heads equal to head 1: every draft is right
    model = model_for("bpd", dictionary, block_heads=4, zero_heads=True, seed=1, eos_bias=-50.0)
    with torch.no_grad():
        model.decoder.output_projection.bias[dictionary.index("w3")] = 50.0
    batch = make_batch(dictionary, [[4, 5, 6], [7, 8]])
    hypos, stats = plugin("bpd", [model], dictionary, batch, max_len_b=13)
    assert [h[0]["tokens"].tolist() for h in hypos] == [[dictionary.index("w3")] * 13 + [dictionary.eos()]] * 2
    # first pass: 1 token (no draft yet); then 3 drafted + 1 own token per pass; EOS forced after 13
    assert [s.iterations for s in stats.per_sentence] == [5, 5]
    # with heads 1 and 2 alone: 1 drafted + 1 own token per pass
    hypos, stats = plugin("bpd", [model], dictionary, batch, SimpleNamespace(bpd_heads=2), max_len_b=13)
    assert [h[0]["tokens"].tolist() for h in hypos] == [[dictionary.index("w3")] * 13 + [dictionary.eos()]] * 2
    assert [s.iterations for s in stats.per_sentence] == [8, 8]


def test_oracle_passes_follow_the_engine_walk():
    # 14 tokens, every draft of 3 kept, drafts end at index 13: 1 + 4 + 4 + 4 tokens, then the forced EOS
    assert analyze_heads.oracle_passes([3] * 14, length=14, max_len=13) == 5
    assert analyze_heads.oracle_passes([0] * 5, length=5, max_len=200) == 5  # nothing kept: greedy
    assert analyze_heads.oracle_passes([2, 0, 0, 0, 0], length=5, max_len=200) == 3  # 1, then 3, then 1


def test_bpd_refuses_models_without_heads():
    dictionary = make_dictionary(20)
    batch = make_batch(dictionary, [[4, 5]])
    with pytest.raises(ValueError, match="not a blockwise_transformer"):
        analyze_heads.analyze([build_transformer(dictionary)], dictionary, [batch], 0.0, 10, top_ks=[1])
    with pytest.raises(ValueError, match="blockwise_transformer"):
        plugin("bpd", [build_transformer(dictionary)], dictionary, batch)
    with pytest.raises(ValueError, match="--block-heads 2 or more"):
        plugin("bpd", [build_transformer(dictionary, block_heads=1)], dictionary, batch)
    for heads_used in (1, 4):
        with pytest.raises(ValueError, match=f"--bpd-heads {heads_used}: this model has 3 heads.*pass 2 to 3"):
            plugin("bpd", [build_transformer(dictionary, block_heads=3)], dictionary, batch,
                   SimpleNamespace(bpd_heads=heads_used))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), block_heads=st.integers(2, 6), zero_heads=st.booleans(),
       identity_first_head=st.booleans(), eos_bias=st.floats(-2.0, 3.0), batch=sentences,
       max_len_b=st.integers(1, 30), batch_of=st.integers(1, 6), draft_vocab=st.sampled_from([0, 0, 3, 9]),
       draft_precision=st.sampled_from(["float32", "auto", "int8"]), heads_used=st.sampled_from([None, None, 2, 3]))
def test_bpd_equals_fairseq_greedy_of_head_one(seed, block_heads, zero_heads, identity_first_head, eos_bias, batch,
                                              max_len_b, batch_of, draft_vocab, draft_precision, heads_used):
    dictionary = make_dictionary(20)
    model = model_for("bpd", dictionary, block_heads, zero_heads, identity_first_head, seed=seed, layers=2,
                      eos_bias=eos_bias)
    collated = make_batch(dictionary, (batch * batch_of)[:max(len(batch), batch_of)])
    expected = fairseq_beam_one([model], dictionary, collated, max_len_b=max_len_b)
    heads_used = None if heads_used is None else min(heads_used, block_heads)
    actual, stats = plugin("bpd", [model], dictionary, collated,
                           SimpleNamespace(draft_vocab=draft_vocab, draft_precision=draft_precision,
                                           bpd_heads=heads_used), max_len_b=max_len_b)
    assert_same_hypotheses(expected, actual)
    assert stats.iterations <= stats.tokens
    if draft_vocab == 0 and draft_precision == "float32" and heads_used in (None, block_heads):
        # the heads' analysis reads every head's top-1 among all words: it predicts bpd's passes from one
        # teacher-forced run over the greedy output
        analysis = analyze_heads.analyze([model], dictionary, [collated], 0.0, max_len_b, top_ks=[1, 2])
        assert analysis.passes[1] == {s.id: s.iterations for s in stats.per_sentence}
        assert analysis.lengths == {s.id: s.hyp_len for s in stats.per_sentence}


@pytest.mark.parametrize("block_heads, identity_first_head, precision, draft_vocab, top_k, heads_used", [
    (4, True, "float32", 0, 0, None), (4, False, "float32", 9, 0, None), (2, True, "int8", 0, 0, None),
    (5, False, "bfloat16", 0, 0, None), (4, True, "float32", 0, 3, None), (3, False, "float32", 9, 2, None),
    (4, True, "float32", 0, 3, 2), (5, False, "float32", 0, 0, 3), (4, False, "int8", 9, 2, 2)])
@torch.no_grad()
def test_the_compiled_heads_draft_as_the_torch_operations_do(block_heads, identity_first_head, precision, draft_vocab,
                                                             top_k, heads_used):
    """``top_k``: the lattice of a refinement (0: each head's top-1), at a chain's and a tree's kept position;
    ``heads_used``: the first heads alone, which draft as they do among all (``None``: all)."""
    dictionary = make_dictionary(20)
    model = model_for("bpd", dictionary, block_heads, identity_first_head=identity_first_head, seed=6)
    refinement = LatticeRescoring(top_k, drafts=1) if top_k else None
    compiled, plain, every_head = (BlockwiseHeadsDrafter(model.decoder, refinement, draft_vocab, precision, used)
                                   for used in (heads_used, heads_used, None))
    assert compiled.compiled
    plain.compiled = every_head.compiled = False  # as on a GPU
    states = torch.randn(3, 5, model.decoder.output_embed_dim, generator=torch.Generator().manual_seed(7))
    scores = SimpleNamespace(hidden_states=lambda model: states)
    tree_path = torch.tensor([[0, 2, 3], [0, 1, 4], [0, 3, 4]])
    for verdict in (SimpleNamespace(path=None, accepted=torch.tensor([0, 4, 2])),
                    SimpleNamespace(path=tree_path, accepted=torch.tensor([2, 1, 0]))):
        for drafter in (compiled, plain, every_head):
            drafter.begin({"src_tokens": torch.ones(3, 2, dtype=torch.long)}, 10)
            drafter.update(scores, verdict, None)
        drafted = (heads_used or block_heads) - 1
        if top_k:
            assert torch.equal(compiled.lattice.tokens, plain.lattice.tokens)
            torch.testing.assert_close(compiled.lattice.scores, plain.lattice.scores)
            assert compiled.lattice.tokens.shape == (3, drafted, top_k)
            assert torch.equal(plain.lattice.tokens, every_head.lattice.tokens[:, :drafted])
        else:
            assert torch.equal(compiled.draft, plain.draft) and compiled.draft.shape == (3, drafted)
            assert torch.equal(plain.draft, every_head.draft[:, :drafted])


@pytest.mark.parametrize("precision", ["float32", "bfloat16", "int8", "auto"])
def test_draft_precision_sets_the_kind_of_the_heads_products(precision):
    dictionary = make_dictionary(20)
    model = model_for("bpd", dictionary, block_heads=3, seed=2)
    generator = build_generator("bpd", [model], dictionary, argparse.Namespace(**GENERATION_DEFAULTS),
                                SimpleNamespace(draft_precision=precision))
    drafter = generator.decoder.drafter
    bfloat16 = np.int32 if vector_kernels.has_bfloat16_dot() else np.uint16
    int8 = np.uint32 if vector_kernels.has_byte_products() else np.int8
    # auto: int8's byte products where the CPU has them, else bfloat16
    auto = int8 if vector_kernels.has_byte_products() else bfloat16
    expected = {"float32": np.float32, "bfloat16": bfloat16, "int8": int8, "auto": auto}[precision]
    assert {product.panels.dtype for product in (drafter.fc1, drafter.fc2, drafter.output)} == {np.dtype(expected)}


@pytest.mark.parametrize("byte_products, bfloat16_dot, expected",
                         [(True, False, "int8"), (True, True, "int8"), (False, True, "bfloat16"),
                          (False, False, "bfloat16")])
def test_auto_draft_precision_follows_the_cpu(monkeypatch, byte_products, bfloat16_dot, expected):
    """The fastest measured: int8's byte products on AVX2 (Zen 3) and with AVX-512 VNNI beside the bfloat16 dot
    product (Zen 4); bfloat16 where the CPU multiplies no bytes."""
    from pardec_fairseq.decoding.drafters import draft_products_precision
    monkeypatch.setattr(vector_kernels, "has_byte_products", lambda: byte_products)
    monkeypatch.setattr(vector_kernels, "has_bfloat16_dot", lambda: bfloat16_dot)
    assert draft_products_precision("auto") == expected
    assert draft_products_precision("float32") == "float32"


def test_a_product_of_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="one of float32, bfloat16, int8, not float16"):
        Product(torch.ones(2, 3), None, "float16")
